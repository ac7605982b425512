"""Self-managed TLS for the admission webhook and the remediation receiver, for clusters without
cert-manager: the pure CA (`ca`), the reloadable server contexts (`tls`) and the Secret-backed edge
(`secret`)."""
