"""The `trainguard` command line: render, validate, crds; bad input exits non-zero, naming the field."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainguard import IMAGE, __version__
from trainguard.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def test_render_kubernetes_stream_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", QUICKSTART]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("PrometheusRule", "trainguard-llama-pretrain"),
        ("AlertmanagerConfig", "trainguard-llama-pretrain"),
        ("PodMonitor", "trainguard-llama-pretrain"),
    ]
    assert all(o["metadata"]["namespace"] == "ml" for o in objs)


def test_render_prometheus_writes_two_files(tmp_path: Path) -> None:
    assert main(["render", "-f", QUICKSTART, "--format", "prometheus", "--out-dir", str(tmp_path)]) == 0
    rules = yaml.safe_load((tmp_path / "rules.yml").read_text())
    am = yaml.safe_load((tmp_path / "alertmanager.yml").read_text())
    assert rules["groups"][0]["name"] == "trainguard.ml.llama-pretrain"
    assert am["route"]["routes"][0]["matchers"] == ['namespace="ml"', 'training_job="llama-pretrain"']


@pytest.mark.parametrize("fmt", ["kubernetes", "prometheus"])
def test_render_writes_severity_in_the_style_asked_and_the_routes_match_priority(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = {}
    for style in ("grade", "mapped"):
        target = tmp_path / style
        assert (
            main(
                [
                    "render",
                    "-f",
                    QUICKSTART,
                    "--format",
                    fmt,
                    "--out-dir",
                    str(target),
                    "--severity-style",
                    style,
                ]
            )
            == 0
        )
        if fmt == "prometheus":
            groups = yaml.safe_load((target / "rules.yml").read_text())["groups"]
            routes = (target / "alertmanager.yml").read_text()
        else:
            objs = list(yaml.safe_load_all((target / "trainguard.yaml").read_text()))
            groups = next(o for o in objs if o["kind"] == "PrometheusRule")["spec"]["groups"]
            routes = yaml.safe_dump(next(o for o in objs if o["kind"] == "AlertmanagerConfig")["spec"])
        labels = {r["alert"]: r["labels"] for g in groups for r in g["rules"] if "alert" in r}
        out[style] = (labels, routes)
    grade, mapped = out["grade"], out["mapped"]
    assert grade[0]["GPUCriticalXid"] == {"priority": "P0", "severity": "P0"}
    assert mapped[0]["GPUCriticalXid"] == {"priority": "P0", "severity": "critical"}
    assert mapped[0]["GPUMemoryHigh"] == {"priority": "P3", "severity": "none"}
    assert grade[1] == mapped[1], "the routes do not depend on the style"
    assert "severity" not in grade[1]


def test_an_unknown_severity_style_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["render", "-f", QUICKSTART, "--severity-style", "critical"])
    assert exit_.value.code == 2
    assert "--severity-style" in capsys.readouterr().err


def test_rendered_quickstart_passes_promtool_and_amtool(promtool: str, amtool: str, tmp_path: Path) -> None:
    assert main(["render", "-f", QUICKSTART, "--format", "prometheus", "--out-dir", str(tmp_path)]) == 0
    for cmd in ([promtool, "check", "rules", "rules.yml"], [amtool, "check-config", "alertmanager.yml"]):
        result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_rendering_is_byte_identical_across_runs(tmp_path: Path) -> None:
    outputs = []
    for i in range(2):
        # a fresh interpreter each time, so no ordering can come from one process's hash seed
        result = subprocess.run(
            [sys.executable, "-m", "trainguard.cli", "render", "-f", QUICKSTART],
            capture_output=True,
            check=True,
            env={"PYTHONHASHSEED": str(i), "PATH": "/usr/bin:/bin"},
        )
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) > 1000


def test_invalid_input_exits_nonzero_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        Path(QUICKSTART)
        .read_text()
        .replace("sigma: 3", "sigma: -3")
        .replace("fullEverySteps: 1000", "fullEverySteps: 1050")
    )
    with pytest.raises(SystemExit) as exc:
        main(["render", "-f", str(bad)])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "spec.baseline.sigma: Input should be greater than 0 (got -3)" in err
    assert "spec.checkpoint: fullEverySteps (1050) must be a multiple of incrementalEverySteps (100)" in err
    assert "Traceback" not in err


def test_validate_reports_ok_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", QUICKSTART]) == 0
    out = capsys.readouterr().out
    assert "ok: TrainingJobMonitor ml/llama-pretrain" in out
    assert "ok: AlertPolicy ml/default" in out


def test_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "-f", "/nonexistent.yaml"])
    assert exc.value.code == 1
    assert "cannot read /nonexistent.yaml" in capsys.readouterr().err


def test_prometheus_format_needs_an_output_dir(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["render", "-f", QUICKSTART, "--format", "prometheus"])
    assert exc.value.code == 2
    assert "--out-dir DIR" in capsys.readouterr().err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "render" in capsys.readouterr().out


def test_render_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(Path(QUICKSTART).read_text()))
    assert main(["render", "-f", "-"]) == 0
    assert "kind: PrometheusRule" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [("--cert-duration", "90x", "is not a duration"), ("--ca-duration", "0s", "longer than zero")],
)
def test_a_bad_certificate_lifetime_is_refused_at_the_flag(
    flag: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["operator", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and why in err


def test_certificate_lifetimes_parse_to_seconds() -> None:
    args = build_parser().parse_args(["operator", "--cert-duration", "2160h", "--cert-renew-before", "1d"])
    assert (args.cert_duration, args.cert_renew_before, args.ca_duration) == (
        2160 * 3600,
        86400,
        3650 * 86400,
    )


def test_the_sidecar_image_defaults_to_this_versions_image_or_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRAINGUARD_SIDECAR_IMAGE", raising=False)
    assert (
        build_parser().parse_args(["operator"]).sidecar_image
        == IMAGE
        == f"ghcr.io/trainguard/trainguard:{__version__}"
    )
    monkeypatch.setenv("TRAINGUARD_SIDECAR_IMAGE", "registry.example/trainguard:1.2.3")
    assert build_parser().parse_args(["operator"]).sidecar_image == "registry.example/trainguard:1.2.3"
    given = build_parser().parse_args(
        ["operator", "--sidecar-image", "registry.example/trainguard@sha256:" + "a" * 64]
    )
    assert given.sidecar_image.endswith("a" * 64), "the flag wins over the environment"


def test_render_shared_rule_form_writes_the_shared_group_and_its_series(
    promtool: str, tmp_path: Path
) -> None:
    args = ["render", "-f", QUICKSTART, "--format", "prometheus", "--rule-form", "shared"]
    assert main([*args, "--out-dir", str(tmp_path)]) == 0
    rules = yaml.safe_load((tmp_path / "rules.yml").read_text())
    assert [g["name"] for g in rules["groups"]] == ["trainguard.shared"]
    settings = (tmp_path / "monitor-settings.prom").read_text()
    assert (
        'trainguard_monitor_setting{monitor_namespace="ml",training_job="llama-pretrain",setting="own_group"} 0'
        in settings
    )
    result = subprocess.run(
        [promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_render_splits_the_shared_group_when_asked(promtool: str, tmp_path: Path) -> None:
    args = ["render", "-f", QUICKSTART, "--format", "prometheus", "--rule-form", "shared"]
    assert main([*args, "--shared-rule-groups", "3", "--out-dir", str(tmp_path)]) == 0
    rules = yaml.safe_load((tmp_path / "rules.yml").read_text())
    assert [g["name"] for g in rules["groups"]] == [
        "trainguard.shared",
        "trainguard.shared.1",
        "trainguard.shared.2",
    ]
    result = subprocess.run(
        [promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_split_groups_are_for_the_shared_form(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "render",
                "-f",
                QUICKSTART,
                "--format",
                "prometheus",
                "--shared-rule-groups",
                "2",
                "--out-dir",
                "x",
            ]
        )
    assert exc.value.code == 2
    assert "--rule-form shared" in capsys.readouterr().err


def test_render_looks_the_shared_annotations_up_only_when_asked(tmp_path: Path) -> None:
    args = ["render", "-f", QUICKSTART, "--format", "prometheus", "--rule-form", "shared"]
    for flags, looked_up in (((), False), (("--shared-annotation-lookups",), True)):
        out = tmp_path / str(looked_up)
        assert main([*args, *flags, "--out-dir", str(out)]) == 0
        rules = yaml.safe_load((out / "rules.yml").read_text())
        shared = next(g for g in rules["groups"] if g["name"] == "trainguard.shared")
        thermal = next(r for r in shared["rules"] if r.get("alert") == "GPUThermalThrottling")
        assert ("| query" in thermal["annotations"].get("trace_id", "")) is looked_up, flags


def test_shared_annotation_lookups_are_for_the_shared_form(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["render", "-f", QUICKSTART, "--format", "prometheus", "--shared-annotation-lookups",
              "--out-dir", "x"])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--shared-annotation-lookups" in err and "--rule-form shared" in err


def test_the_shared_rule_form_is_for_the_prometheus_format(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["render", "-f", QUICKSTART, "--rule-form", "shared"])
    assert exc.value.code == 2
    assert "--format prometheus" in capsys.readouterr().err
