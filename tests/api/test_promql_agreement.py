"""The PromQL check in the models agrees with Prometheus' own parser, `promtool check rules`.

A custom rule's expression that the model accepts but Prometheus rejects makes prometheus-operator drop
the job's whole rule group; one the model rejects but Prometheus accepts blocks a valid policy. The
corpus mixes valid and broken expressions, with `$selector` in several places; promtool is the oracle.
"""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY, merged
from trainguard.api import AlertPolicy, InvalidInput, load_documents, parse_object
from trainguard.api.promql import promql_problem
from trainguard.render import dump_yaml, render_prometheus

SELECTOR = 'namespace="ml",training_job="llama-pretrain"'
"""What render/prometheus.py puts for `$selector` for the monitor in tests/conftest.py."""

CORPUS: list[str] = [
    "up == 0",
    "up{$selector} == 0",
    "trainguard_train_loss{$selector} > 10",
    "{$selector}",
    '{__name__="trainguard_train_step",$selector}',
    'trainguard_train_step{$selector,pod=~"worker-.*"}',
    'trainguard_train_step{pod!="x",$selector}',
    "rate(trainguard_train_nonfinite_loss_total{$selector}[5m]) > 0",
    "increase(trainguard_train_nonfinite_loss_total{$selector}[5m]) > 0",
    "avg_over_time(trainguard_train_loss{$selector}[1h] offset 10m)",
    "trainguard_train_loss{$selector} offset 1h",
    "trainguard_train_loss{$selector} offset -5m",
    "trainguard_train_loss{$selector} offset 1h30m",
    "max_over_time(trainguard_train_grad_norm{$selector}[1h:1m])",
    "max_over_time(rate(x{$selector}[5m])[1h:])",
    "min_over_time(deriv(trainguard_train_step{$selector}[10m])[30m:1m] offset 5m)",
    "trainguard_train_loss{$selector} @ 1700000000",
    "trainguard_train_loss{$selector} @ start()",
    "trainguard_train_loss{$selector} @ end() offset 5m",
    "rate(x{$selector}[5m] @ end())",
    "trainguard_train_loss{$selector} > bool 10",
    "(x{$selector} == bool 1) + 0",
    "x{$selector} * on(namespace, pod) group_left(node) kube_pod_info",
    "x{$selector} / ignoring(gpu) group_right y",
    "x{$selector} and on() vector(1)",
    "x{$selector} unless y",
    "x{$selector} or y",
    'label_replace(x{$selector}, "host", "$1", "node", "(.*)")',
    'label_join(x{$selector}, "id", "-", "a", "b")',
    "histogram_quantile(0.99, sum by (le) (rate(latency_bucket{$selector}[5m]))) > 0.2",
    "histogram_quantile(0.9, rate(latency_bucket{$selector}[5m]))",
    "histogram_count(rate(latency{$selector}[5m]))",
    "histogram_sum(rate(latency{$selector}[5m]))",
    "histogram_fraction(0, 0.2, rate(latency{$selector}[5m]))",
    "holt_winters(x{$selector}[10m], 0.5, 0.5)",
    "predict_linear(trainguard_host_memory_used_ratio{$selector}[30m], 3600) > 1",
    "absent(trainguard_train_step{$selector})",
    "absent_over_time(trainguard_train_step{$selector}[10m])",
    "present_over_time(trainguard_train_step{$selector}[10m])",
    "last_over_time(trainguard_train_step{$selector}[10m])",
    "quantile_over_time(0.9, x{$selector}[1h])",
    "stddev_over_time(x{$selector}[1h]) > 3 * avg_over_time(x{$selector}[1h])",
    "changes(trainguard_train_loss_scale{$selector}[10m]) > 5",
    "resets(x{$selector}[1h])",
    "delta(x{$selector}[5m])",
    "idelta(x{$selector}[5m])",
    "irate(x{$selector}[5m])",
    "time() - trainguard_train_last_step_timestamp_seconds{$selector} > 300",
    "timestamp(x{$selector})",
    'count_values("v", x{$selector})',
    "topk(3, x{$selector})",
    "bottomk by (node) (1, x{$selector})",
    "quantile by (node) (0.5, x{$selector})",
    "sum without (gpu) (x{$selector})",
    "sum(x{$selector}) by (node)",
    "count by (node) (x{$selector}) > 1",
    "group by (node) (x{$selector})",
    "stddev(x{$selector})",
    "stdvar by (a) (x{$selector})",
    "clamp(x{$selector}, 0, 1)",
    "clamp_max(x{$selector}, 1)",
    "sgn(x{$selector})",
    "abs(-x{$selector})",
    "-x{$selector}",
    "x{$selector} ^ 2 % 3",
    "x{$selector} atan2 y",
    "scalar(x{$selector}) > 1",
    "vector(1)",
    "1 > bool 0",
    "1",
    '"text"',
    "day_of_week() == 0",
    "hour(trainguard_train_last_step_timestamp_seconds{$selector})",
    "sort_desc(x{$selector})",
    "x{$selector} > 0.5e-3",
    "x{$selector} > 0x1f",
    "x{$selector} > Inf",
    "x{$selector} != NaN",
    "# a comment\nup{$selector} == 0",
    "sum by (namespace, training_job) (\n  rate(x{$selector}[5m])\n) > 0",
    "x{$selector}[5m:30s]",
    "x{$selector}[1d]",
    "x{$selector}[1y]",
    "x{$selector}[1m30s]",
    'x{$selector, a=~"(foo|bar)"}',
    'x{$selector, a!~"^x+$"}',
    "x{$selector,}",
    "count(count by (node) (x{$selector}))",
    "round(x{$selector}, 0.5)",
    "ln(x{$selector}) + log2(x{$selector}) + log10(x{$selector}) + exp(x{$selector})",
    "sqrt(x{$selector}) * deg(x{$selector}) * rad(x{$selector}) * pi()",
    "up =! 0",
    "up == ",
    "rate(x{$selector}[5m]",
    "rate(x{$selector}[5m]))",
    "sum by (node (x{$selector})",
    "x{$selector",
    "x{$selector}}",
    "ratee(x{$selector}[5m])",
    "avg_over_tim(x{$selector}[5m])",
    "foo(x{$selector})",
    "rate(x{$selector})",
    "rate(x{$selector}[5m], 2)",
    "histogram_quantile(x{$selector})",
    "histogram_quantile(0.9)",
    "sum(rate(x{$selector}[5m])[5m])",
    "x{$selector}[5]",
    "x{$selector}[5 m]",
    "x{$selector}[]",
    "x{$selector}[5m] > 1",
    "x{$selector}[-5m]",
    'x{a="b}',
    "x{a=b}",
    'x{a=="b"}',
    'x{"a"}',
    'x{a=~"["}',
    'x{a=~"(unclosed"}',
    '{a=~".*"}',
    '{a!=""}',
    "x{} == 0",
    "$selector",
    "x and $selector",
    "x{$selector} offset",
    "x{$selector} offset 5",
    "x{$selector} offset 5m offset 1m",
    "x{$selector} @ yesterday()",
    "sum(x{$selector}) @ start()",
    "x{$selector} @ ",
    "x{$selector} == bool",
    "x{$selector} + bool y",
    "x{$selector} * on(a) group_left(b) group_right y",
    "x{$selector} and on(a) group_left y",
    "x{$selector} * on a y",
    "sum by node (x{$selector})",
    "topk(x{$selector})",
    "topk(3)",
    "count_values(x{$selector})",
    'label_replace(x{$selector}, "host", "$1", "node")',
    'label_replace(x{$selector}, "host", "$1", "node", "(.*")',
    'label_replace(x{$selector}, "1bad", "$1", "node", "(.*)")',
    "1 > bool",
    "x{$selector} > > 1",
    "x{$selector} >= = 1",
    "x{$selector} => 1",
    "x{$selector} && y",
    "x{$selector} || y",
    "not x{$selector}",
    "x{$selector} AND ON y",
    "'unterminated",
    "x{$selector}[5m:1m:1m]",
    "x{$selector}[5m:1m] @",
    "min_over_time(x{$selector}[1h:1m] offset)",
    "sum without () x{$selector}",
    "abs()",
    "vector()",
    "time(x{$selector})",
    "()",
    "(x{$selector}",
    "x{$selector} )",
    "-",
    "x{$selector} % ",
    "1 2",
    "x y",
    "x{$selector} offset 1h @ ",
    "x{$selector}[5m] offset 1h",
    'up{a="b"} unless ignoring() up{$selector}',
    "up.with.dots",
    "sum(x{$selector}) by node",
    "quantile(2, x{$selector})",
    "avg(x{$selector}, 1)",
    "x{$selector}[1h:5m] > 0",
    "deriv(x{$selector}[10m]) offset 5m",
    "rate(x{$selector}[5m] offset 1h)",
    "irate(x{$selector}[5m:])",
    "x{$selector} == -Inf",
    "2 * -x{$selector}",
    "-(x{$selector})",
    "+x{$selector}",
    "x{$selector} - -1",
    "'single quoted' == 1",
    "`raw`",
]

ONE_PROMETHEUS_ONLY: dict[str, set[str]] = {
    # What one of the two toolchains (tests/toolchains.py) reads and the other refuses: the model refuses
    # it, since the cluster's Prometheus may be either and a group that does not load silences the job.
    "upstream": {  # Prometheus 3: a bare number is seconds in a range, step or offset; quoted UTF-8 names
        "x{$selector}[5]",
        "x{$selector} offset 5",
        "x{$selector}[5m:5]",
        'x{$selector,"a-b"="v"}',
        '{"my.metric",$selector}',
    },
    "debian": {  # Prometheus 2's name for what Prometheus 3 calls double_exponential_smoothing
        "holt_winters(x{$selector}[10m], 0.5, 0.5)",
    },
}
CORPUS += [
    *sorted(ONE_PROMETHEUS_ONLY["upstream"] - set(CORPUS)),
    # experimental in Prometheus 3 (a feature flag), unknown to 2: refused by both promtools
    "double_exponential_smoothing(x{$selector}[10m], 0.5, 0.5)",
    'sort_by_label(x{$selector}, "pod")',
    "mad_over_time(x{$selector}[5m])",
    "limitk(1, x{$selector})",
]


def promtool_verdicts(promtool: str, tmp: Path, exprs: list[str]) -> dict[str, str | None]:
    """expr -> None when `promtool check rules` accepts it as an alert's expr, else promtool's error.

    One rules file per expression, all checked in one run, so an error maps back to its expression.
    """
    files = []
    for i, expr in enumerate(exprs):
        group = {"name": "g", "rules": [{"alert": "A", "expr": expr.replace("$selector", SELECTOR)}]}
        (tmp / f"e{i}.yml").write_text(dump_yaml({"groups": [group]}))
        files.append(f"e{i}.yml")
    result = subprocess.run(
        [promtool, "check", "rules", *files],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    passed = {
        block.split("\n", 1)[0].strip()
        for block in result.stdout.split("Checking ")[1:]
        if "SUCCESS" in block
    }
    errors = {
        line.split(": ", 1)[0]: line.split(": ", 1)[1]
        for line in result.stderr.splitlines()
        if line.startswith("e") and ".yml: " in line
    }
    return {
        expr: None if name in passed else errors.get(name, result.stderr or "rejected")
        for expr, name in zip(exprs, files, strict=True)
    }


def test_corpus_has_both_kinds_and_no_duplicates() -> None:
    assert len(set(CORPUS)) == len(CORPUS)
    verdicts = [promql_problem(e) is None for e in CORPUS]
    assert sum(verdicts) >= 80 and verdicts.count(False) >= 60


@pytest.mark.tools
def test_model_accepts_exactly_what_promtool_accepts(promtool: str, toolchain: str, tmp_path: Path) -> None:
    """Exactly, but for what only this toolchain's Prometheus reads (ONE_PROMETHEUS_ONLY), which the
    model refuses and the other toolchain's promtool too."""
    verdicts = promtool_verdicts(promtool, tmp_path, CORPUS)
    (other,) = set(ONE_PROMETHEUS_ONLY) - {toolchain}
    disagreements = []
    for expr, promtool_error in verdicts.items():
        model_error = promql_problem(expr)
        if expr in ONE_PROMETHEUS_ONLY[toolchain]:
            assert promtool_error is None and model_error is not None, (expr, promtool_error, model_error)
        elif expr in ONE_PROMETHEUS_ONLY[other]:
            assert promtool_error is not None and model_error is not None, (expr, promtool_error, model_error)
        elif (model_error is None) != (promtool_error is None):
            disagreements.append(
                f"{expr!r}: model: {model_error or 'ok'}; promtool: {promtool_error or 'ok'}"
            )
    assert not disagreements, "\n".join(disagreements)
    assert sum(v is None for v in verdicts.values()) >= 80, "the corpus lost its valid expressions"


def rendered_rules(backend: str, mode: str) -> list[dict[str, Any]]:
    """Every rule the renderer writes for one monitor, with a custom rule using `$selector`."""
    mon = merged(MONITOR, **{"spec.exporter": {"gpuBackend": backend}, "spec.mode": mode})
    pol = merged(
        POLICY,
        **{
            "spec.customRules": [
                {
                    "name": "MyLossSpike",
                    "expr": "trainguard_train_loss{$selector} > 2 * avg_over_time(trainguard_train_loss{$selector}[1h])",
                    "severity": "P2",
                }
            ]
        },
    )
    docs = load_documents([("m.yaml", dump_yaml(mon)), ("p.yaml", dump_yaml(pol))])
    (group,) = render_prometheus(docs)["rules.yml"]["groups"]
    rules: list[dict[str, Any]] = group["rules"]
    return rules


@pytest.mark.parametrize(
    ("backend", "mode"),
    list(itertools.product(["nvml", "dcgm", "simulated"], ["training", "finetuning", "inference"])),
)
def test_every_rendered_expression_passes_the_model_check(backend: str, mode: str) -> None:
    rules = rendered_rules(backend, mode)
    assert len(rules) > 20
    bad = {r.get("alert") or r.get("record"): promql_problem(r["expr"]) for r in rules}
    assert not {k: v for k, v in bad.items() if v}


@pytest.mark.tools
def test_rendered_expressions_agree_with_promtool(promtool: str, tmp_path: Path) -> None:
    exprs = sorted(
        {
            r["expr"]
            for backend, mode in itertools.product(
                ["nvml", "dcgm", "simulated"], ["training", "finetuning", "inference"]
            )
            for r in rendered_rules(backend, mode)
        }
    )
    verdicts = promtool_verdicts(promtool, tmp_path, exprs)
    assert {e: v for e, v in verdicts.items() if v is not None} == {}
    assert {e: promql_problem(e) for e in exprs if promql_problem(e)} == {}


def policy_problems(rule: dict[str, Any]) -> dict[str, str]:
    docs = merged(POLICY, **{"spec.customRules": [rule]})
    with pytest.raises(InvalidInput) as exc:
        parse_object(docs)
    return {p.path: p.message for p in exc.value.problems}


def test_a_bad_expression_names_the_field_and_the_fix() -> None:
    found = policy_problems({"name": "Mine", "expr": "rate(x{$selector}[5m] > 0", "severity": "P1"})
    message = found["spec.customRules[0].expr"]
    assert message.startswith("not valid PromQL: unclosed left parenthesis")
    assert "promtool check rules" in message


@pytest.mark.parametrize(
    "expr",
    [
        "ratee(trainguard_train_step{$selector}[5m]) == 0",
        "trainguard_train_step{$selector == 0",
        'trainguard_train_step{$selector, pod=~"("} == 0',
        "sum by node (trainguard_train_step{$selector})",
    ],
)
def test_typos_are_rejected(expr: str) -> None:
    assert (
        "not valid PromQL"
        in policy_problems({"name": "Mine", "expr": expr, "severity": "P1"})["spec.customRules[0].expr"]
    )


@pytest.mark.parametrize(
    "expr",
    [
        "trainguard_train_step{$selector} == 0",
        "{$selector}",
        'up{job="x",$selector} == 0',
    ],
)
def test_valid_expressions_are_accepted(expr: str) -> None:
    obj = parse_object(
        merged(POLICY, **{"spec.customRules": [{"name": "Mine", "expr": expr, "severity": "P1"}]})
    )
    assert isinstance(obj, AlertPolicy)
    assert obj.spec.custom_rules[0].expr == expr


@pytest.mark.parametrize(
    ("expr", "fix"),
    [
        ("holt_winters(trainguard_train_loss{$selector}[10m], 0.5, 0.5) > 1", "Prometheus 3 removed it"),
        ("rate(trainguard_train_step{$selector}[300]) == 0", "write 5m or 30s"),
        ('trainguard_train_step{$selector,"gpu-id"="0"} == 0', "use letters, digits and _"),
        (
            "limitk(1, trainguard_train_step{$selector}) == 0",
            "--enable-feature=promql-experimental-functions",
        ),
    ],
)
def test_what_one_prometheus_reads_is_refused_with_the_portable_form(expr: str, fix: str) -> None:
    """A custom rule must load on Prometheus 2 and 3 alike: the cluster's may be either."""
    assert (
        fix in policy_problems({"name": "Mine", "expr": expr, "severity": "P1"})["spec.customRules[0].expr"]
    )
