"""The bounds every loader keeps (issue 22), pinned component by component: alias expansion, line length."""

from __future__ import annotations

import io

import pytest

from simroute.errors import ConfigurationError
from simroute.ioutil import MAX_YAML_NODES, bounded_lines, check_line_lengths, load_yaml


def test_anchors_used_a_few_times_load_and_a_long_plain_list_is_not_a_bomb(tmp_path):
    (tmp_path / "a.yaml").write_text("base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: *b\n")
    assert load_yaml(tmp_path / "a.yaml") == {"base": {"x": 1, "y": [1, 2]}, "one": {"x": 1, "y": [1, 2]},
                                              "two": {"x": 1, "y": [1, 2]}}
    (tmp_path / "long.yaml").write_text("".join(f"- {i}\n" for i in range(2 * MAX_YAML_NODES)))
    assert len(load_yaml(tmp_path / "long.yaml")) == 2 * MAX_YAML_NODES      # no alias: never refused


@pytest.mark.parametrize("levels, refused", [(4, False), (6, True)])
def test_alias_expansion_is_refused_past_the_bound(tmp_path, levels, refused):
    """Ten-fold aliases: 10^4 values expand to ~11,000 (kept), 10^6 to ~1.1M (past 100,000: refused)."""
    lines = ["a0: &a0 [" + ", ".join(["v"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    path = tmp_path / "b.yaml"
    path.write_text("\n".join(lines) + "\n")
    if refused:
        with pytest.raises(ConfigurationError, match="alias") as err:
            load_yaml(path)
        assert "b.yaml" in str(err.value)
    else:
        assert len(load_yaml(path)) == levels


@pytest.mark.parametrize("block", [7, 16, 1 << 20])
def test_a_line_past_the_cap_is_named_by_its_number_whatever_the_block(tmp_path, block):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a" * 100 + b"\n" + b"b" * 40 + b"\n" + b"c" * 101 + b"\n" + b"d\n")
    with pytest.raises(ConfigurationError) as err:
        check_line_lengths(path, max_bytes=100, block=block)
    assert err.value.line == 3
    path.write_bytes(b"a" * 100 + b"\n" + b"b" * 100)          # at the cap, last line without a newline: fine
    check_line_lengths(path, max_bytes=100, block=block)


def test_bounded_lines_yields_numbered_lines_and_stops_at_an_endless_one(tmp_path):
    stream = io.BytesIO(b"x\n\nyy\n" + b"z" * 50 + b"\n")
    with pytest.raises(ConfigurationError) as err:
        lines = []
        for number, line in bounded_lines(stream, tmp_path / "m.jsonl", max_bytes=20):
            lines.append((number, line))
    assert lines == [(1, b"x\n"), (2, b"\n"), (3, b"yy\n")] and err.value.line == 4
