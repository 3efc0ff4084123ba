"""The cost per team (issue 29.4): the named query ``gpu-cost-per-caller-model-day`` run by DuckDB on sample rows of
``gpu_node_hours`` and ``capture_records`` (the SQL Athena gets, with the time window widened), checked against a
plain-Python allocation, and the promise of docs/usage-and-budgets.md#cost-per-team: for each group and day, the
callers' costs and the idle row add up to node-hours x price."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pytest

from hyperpod_inference_iac.capture.capture_tables import (
    IDLE_CALLER,
    NODE_HOURS_COLUMNS,
    gpu_cost_query,
    named_queries,
)

DAY1 = datetime(2026, 12, 1, tzinfo=UTC)
QWEN, MISTRAL = "Qwen/Qwen3-8B", "mistral-7b-instruct"
EKS = ("eks-nodegroup", "llm-platform", "gpu-g6e", "g6e.12xlarge", 10.49, [QWEN])
HYPERPOD = ("hyperpod-instance-group", "llm-platform-hp", "inference-g5", "ml.g5.12xlarge", 7.09, [MISTRAL])


def _at(day: int, hour: int, minute: int = 0) -> datetime:
    return DAY1 + timedelta(days=day, hours=hour, minutes=minute)


# (hour, group, nodes): the sampler's rows. Day 0: the EKS group runs 1 node 09-12 (12 idle), 2 nodes at 13;
# HyperPod 2 nodes 09-11 (11 idle). Day 1: the EKS group at 0 nodes (no cost), HyperPod 1 node at 10 (idle).
SAMPLES = [
    *((_at(0, h, 5), EKS, 1) for h in (9, 10, 11, 12)), (_at(0, 13, 5), EKS, 2),
    *((_at(0, h, 5), HYPERPOD, 2) for h in (9, 10, 11)),
    (_at(1, 10, 5), EKS, 0), (_at(1, 10, 5), HYPERPOD, 1),
    # a second sample in the same hour (a retried run after a scale-up): the hour's last sample counts
    (_at(0, 13, 40), EKS, 3),
]

# (time, caller, model, input, output, refused_by)
RECORDS = [
    (_at(0, 9, 1), "team-a", QWEN, 300, 700, None),
    (_at(0, 9, 30), "team-b", QWEN, 1000, 1000, None),
    (_at(0, 9, 31), "team-b", QWEN, 5000, 0, "tokensPerMinute"),  # refused: not served, not charged
    (_at(0, 10, 2), "team-a", QWEN, 100, 100, None),
    (_at(0, 11, 59), "team-b", QWEN, 50, 150, None),
    (_at(0, 13, 10), "team-a", QWEN, 10, 30, None),
    (_at(0, 13, 50), None, QWEN, 20, 40, None),          # no key: the caller "-"
    (_at(0, 9, 15), "team-a", MISTRAL, 400, 400, None),
    (_at(0, 10, 15), "team-c", MISTRAL, 900, 100, None),
    (_at(0, 10, 16), "team-a", MISTRAL, 0, 0, None),     # an error without tokens: nothing to share
    (_at(0, 12, 0), "team-c", "unplaced-model", 10, 10, None),  # a model no group serves: not costed
    (_at(1, 11, 0), "team-a", MISTRAL, 10, 10, None),    # outside the HyperPod group's sampled hour
]


def _database(samples: list[Any] = SAMPLES, records: list[Any] = RECORDS) -> duckdb.DuckDBPyConnection:
    db = duckdb.connect()
    db.execute("SET TimeZone = 'UTC'")
    db.execute("CREATE SCHEMA capture")
    types = {"timestamp": "TIMESTAMPTZ", "string": "VARCHAR", "int": "INTEGER", "double": "DOUBLE",
             "array<string>": "VARCHAR[]"}
    columns = ", ".join(f"{c.name} {types[c.type]}" for c in NODE_HOURS_COLUMNS)
    db.execute(f"CREATE TABLE capture.gpu_node_hours ({columns})")
    db.execute("CREATE TABLE capture.capture_records (inference_time TIMESTAMPTZ, caller_id VARCHAR, "
               "gen_ai_request_model VARCHAR, gen_ai_response_model VARCHAR, gen_ai_usage_input_tokens BIGINT, "
               "gen_ai_usage_output_tokens BIGINT, refused_by VARCHAR)")
    for sampled, (kind, cluster, group, instance_type, price, models), nodes in samples:
        db.execute("INSERT INTO capture.gpu_node_hours VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [sampled, sampled.replace(minute=0), kind, cluster, group, instance_type, nodes, price, models,
                    "h"])
    for time, caller, model, tokens_in, tokens_out, refused in records:
        db.execute("INSERT INTO capture.capture_records VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [time, caller, None, model, tokens_in, tokens_out, refused])
    return db


def _run(db: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    result = db.execute(gpu_cost_query("capture", "TIMESTAMP '2026-11-01 00:00:00+00'"))
    names = [d[0] for d in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def _python_allocation() -> dict[tuple[Any, ...], float]:
    """The same allocation, written the plain way: per group-hour, its last sample's cost shared by tokens."""
    last: dict[tuple[Any, ...], tuple[datetime, Any, int]] = {}
    for sampled, group, nodes in SAMPLES:
        key = (sampled.replace(minute=0), group[2])
        if key not in last or last[key][0] < sampled:
            last[key] = (sampled, group, nodes)
    costs: dict[tuple[Any, ...], float] = defaultdict(float)
    for (hour, name), (_, group, nodes) in last.items():
        if nodes == 0:
            continue
        tokens: dict[tuple[str, str], int] = defaultdict(int)
        for time, caller, model, tokens_in, tokens_out, refused in RECORDS:
            if refused is None and model in group[5] and time.replace(minute=0, second=0) == hour:
                tokens[(caller or "-", model)] += tokens_in + tokens_out
        total = sum(tokens.values())
        for (caller, model), count in tokens.items():
            if count:
                costs[(hour.date(), name, caller, model)] += nodes * group[4] * count / total
        if not total:
            costs[(hour.date(), name, IDLE_CALLER, None)] += nodes * group[4]
    return costs


def test_the_named_query_is_the_one_athena_gets() -> None:
    access, _, sql = named_queries("inference_capture_iceberg")["gpu-cost-per-caller-model-day"]
    assert access == "usage"
    assert sql == gpu_cost_query("inference_capture_iceberg", "current_timestamp - INTERVAL '7' DAY")


def test_callers_and_idle_add_up_to_node_hours_times_price_for_each_group_and_day() -> None:
    rows = _run(_database())
    by_group_day: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_group_day[(row["day"], row["group_name"])].append(row)
    expected_hours = {
        (DAY1.date(), "gpu-g6e"): 1 + 1 + 1 + 1 + 3, (DAY1.date(), "inference-g5"): 2 * 3,
        ((DAY1 + timedelta(days=1)).date(), "inference-g5"): 1}
    assert set(by_group_day) == set(expected_hours)  # (a day at 0 nodes costs nothing and has no row)
    for key, group_rows in by_group_day.items():
        price = group_rows[0]["cost_usd"] / group_rows[0]["node_hours"]
        assert sum(r["node_hours"] for r in group_rows) == pytest.approx(expected_hours[key])
        assert sum(r["cost_usd"] for r in group_rows) == pytest.approx(expected_hours[key] * price)
        assert price == pytest.approx(10.49 if key[1] == "gpu-g6e" else 7.09)


def test_each_callers_share_is_its_tokens_share_hour_by_hour() -> None:
    rows = _run(_database())
    got = {(r["day"], r["group_name"], r["caller_id"], r["model"]): r["cost_usd"] for r in rows}
    expected = _python_allocation()
    assert got.keys() == expected.keys()
    for key, cost in expected.items():
        assert got[key] == pytest.approx(cost), key
    day = DAY1.date()
    # By hand, the EKS group on day 0: 09h 1 node (a 1000 of 3000 tokens, b 2000), 10h all a, 11h all b, 12h idle,
    # 13h 3 nodes (its last sample): a 40 of 100 tokens, "-" 60.
    assert got[(day, "gpu-g6e", "team-a", QWEN)] == pytest.approx(10.49 * (1 / 3 + 1 + 3 * 0.4))
    assert got[(day, "gpu-g6e", "team-b", QWEN)] == pytest.approx(10.49 * (2 / 3 + 1))
    assert got[(day, "gpu-g6e", "-", QWEN)] == pytest.approx(10.49 * 3 * 0.6)
    assert got[(day, "gpu-g6e", IDLE_CALLER, None)] == pytest.approx(10.49)
    # HyperPod on day 0: 09h all a, 10h all c (a's request of 0 tokens takes no share), 11h idle, 2 nodes each.
    assert got[(day, "inference-g5", "team-a", MISTRAL)] == pytest.approx(2 * 7.09)
    assert got[(day, "inference-g5", "team-c", MISTRAL)] == pytest.approx(2 * 7.09)
    assert got[(day, "inference-g5", IDLE_CALLER, None)] == pytest.approx(2 * 7.09)
    idle = [r for r in rows if r["idle"]]
    assert all(r["caller_id"] == IDLE_CALLER and r["model"] is None and r["tokens"] == 0 for r in idle)
    # the refused request and the model no group serves are charged to nobody
    assert sum(r["tokens"] for r in rows if r["group_name"] == "gpu-g6e") == 1000 + 2000 + 200 + 200 + 40 + 60


def test_a_group_serving_two_models_shares_its_hours_across_both() -> None:
    shared = ("eks-nodegroup", "llm-platform", "gpu-shared", "g6e.12xlarge", 10.0, [QWEN, MISTRAL])
    rows = _run(_database(samples=[(_at(0, 9, 5), shared, 4)], records=[
        (_at(0, 9, 10), "team-a", QWEN, 100, 200, None), (_at(0, 9, 20), "team-b", MISTRAL, 600, 100, None)]))
    got = {(r["caller_id"], r["model"]): (r["node_hours"], r["cost_usd"]) for r in rows}
    assert got == {("team-a", QWEN): pytest.approx((1.2, 12.0)), ("team-b", MISTRAL): pytest.approx((2.8, 28.0))}
