"""plan.md's counts of hosts read as English at one host (a newcomer's pass found "binding at 1 hosts")."""

from __future__ import annotations

from simroute.study.plan import hosts_words, plan_markdown


def test_hosts_words_singular_and_plural():
    assert [hosts_words(n) for n in (1, 2, 21)] == ["1 host", "2 hosts", "21 hosts"]


def test_plan_memo_says_one_host_where_the_binding_and_the_nonmonotone_edge_are_at_one_host():
    own = {"hosts": 2, "gpus": 16, "status": "met", "band": None, "candidate": True, "at_answer": None,
           "nonmonotone": [{"meets": 1, "fails": 2}], "probes": [],
           "binding": {"hosts": 1, "violated": ["tpot_ms_p99 <= 50"], "resource": "HBM"}}
    answer = {"deployment": "tp8", "deployments": {"tp8": own}, "slo": ["tpot_ms_p99 <= 50"],
              "nonmonotone": [{"deployment": "tp8", "meets": 1, "fails": 2}], "frontier": []}
    text = plan_markdown(answer, {"base": {"trace": "agents.parquet", "tp": 8, "model": "deepseek-v3"},
                                  "seeds": 1, "search": {"lo": 1, "hi": 4}})
    assert "Binding below the answer (at 1 host): tpot_ms_p99 <= 50; HBM." in text
    assert "tp8: meets at 1 host, fails at 2 hosts" in text
    assert "1 hosts" not in text
