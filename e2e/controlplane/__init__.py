"""A real Kubernetes control plane as local processes (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) plus fake GPU nodes, for the e2e tests; built from Go modules by build.sh."""
