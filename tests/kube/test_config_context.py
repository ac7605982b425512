"""`--context`, as kubectl has it: the kubeconfig's named context instead of its current-context, for
the commands' clients and the operator's logins alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kube.apiserver import kubeconfig
from trainguard.controller.run import connection_info
from trainguard.kube import ConfigError, client_configuration

SERVERS = {"one": "https://10.0.0.1:6443", "two": "https://10.0.0.2:6443"}


def test_the_context_named_is_used_instead_of_the_current_one(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path / "config", SERVERS, current="one"))
    assert client_configuration(path).host == SERVERS["one"]
    assert client_configuration(path, "two").host == SERVERS["two"]
    assert connection_info(path, "two").server == SERVERS["two"]


def test_a_context_alone_reads_the_kubeconfig_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "config", SERVERS, current="one")))
    assert client_configuration(None, "two").host == SERVERS["two"]


def test_an_unknown_context_is_an_error_naming_it(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path / "config", SERVERS, current="one"))
    with pytest.raises(ConfigError, match="three"):
        client_configuration(path, "three")
