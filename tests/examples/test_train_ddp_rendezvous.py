"""examples/train_ddp.py's rendezvous: torch.distributed's variables first (a Job, or torchrun's workers),
else the PET_* ones Kubeflow Trainer's torch runtime sets on a TrainJob's node, one process per node."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from tests.sdk_frameworks.conftest import REPO, require

require("torch.distributed")


def train_ddp() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_ddp", REPO / "examples" / "train_ddp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# what Trainer v2.2.0 sets on a TrainJob's trainer container (numProcPerNode 1)
TRAINER = {"PET_NODE_RANK": "1", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
           "PET_MASTER_ADDR": "llama-node-0-0.llama", "PET_MASTER_PORT": "29500"}  # fmt: skip


def test_torch_distributed_variables_are_read_as_they_are() -> None:
    env = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}
    assert train_ddp().rendezvous(env) == (1, 4, "10.0.0.1", 1234)


def test_a_trainjob_node_is_the_rank_with_trainers_variables() -> None:
    assert train_ddp().rendezvous(TRAINER) == (1, 2, "llama-node-0-0.llama", 29500)


def test_master_addr_and_port_override_trainers_and_torchruns_variables_win() -> None:
    env = {**TRAINER, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "40000"}
    assert train_ddp().rendezvous(env) == (1, 2, "127.0.0.1", 40000)
    torchrun = {**TRAINER, "PET_NPROC_PER_NODE": "auto", "RANK": "3", "WORLD_SIZE": "8",
                "MASTER_ADDR": "llama-node-0-0.llama", "MASTER_PORT": "29500"}  # fmt: skip
    assert train_ddp().rendezvous(torchrun) == (3, 8, "llama-node-0-0.llama", 29500), (
        "under torchrun its worker's RANK and WORLD_SIZE, not the node's"
    )


def test_several_processes_per_node_without_torchrun_is_refused_naming_the_field() -> None:
    with pytest.raises(SystemExit, match=r"PET_NPROC_PER_NODE=auto: .*spec.trainer.numProcPerNode to 1"):
        train_ddp().rendezvous({**TRAINER, "PET_NPROC_PER_NODE": "auto"})
