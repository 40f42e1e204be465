"""Trimmed operator tables (simroute.calib.trim): the rows no shipped model reads are dropped and every model step
reads identically. Checked by hand on a small GEMM table, and on the shipped (untrimmed) H200 SGLang set: a step
model of two models at every TP degree, both weight and KV dtypes and both MLA layouts gives the same terms,
lookups and notes from the trimmed set as from the whole one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simroute.calib.optables import load_operator_tables
from simroute.calib.profile import shipped_dir
from simroute.calib.trim import Read, tp_degrees, trim_rows, trim_tables
from simroute.model.geometry import get_model
from simroute.model.optables import OperatorTables, OpKind, OpTable
from simroute.model.steptime import BatchShape, GpuSpec, StepTimeModel

MODELS = ("deepseek-v3", "llama-3.1-8b")
KINDS = (OpKind.GEMM, OpKind.MOE, OpKind.ATTENTION_PREFILL, OpKind.ATTENTION_DECODE, OpKind.MLA_PREFILL,
         OpKind.MLA_DECODE)


def _gemm(rows: list[tuple[str, int, int, int, float]]) -> OpTable:
    dtype, m, n, k, lat = zip(*rows)
    return OpTable(OpKind.GEMM, {"dtype": np.array(dtype)}, {"m": np.array(m, float), "n": np.array(n, float),
                                                            "k": np.array(k, float)}, np.array(lat, float))


def test_a_read_keeps_the_two_grid_values_around_it_in_every_dtype():
    rows = [(dtype, m, n, 4096, 1.0 + m + n / 1e3) for dtype in ("bf16", "fp8") for n in (1024, 2048, 4096, 8192)
            for m in (1, 2, 4)]
    rows.append(("nvfp4", 1, 1024, 4096, 3.0))                     # a dtype measured at one shape only
    table = _gemm(rows)
    keep = trim_rows(table, [Read(OpKind.GEMM, "m", (("k", 4096.0), ("n", 3000.0)))])
    kept = {(str(d), int(m), int(n)) for d, m, n in zip(table.categorical["dtype"][keep], table.numeric["m"][keep],
                                                        table.numeric["n"][keep])}
    # by hand: n = 3000 lies between 2048 and 4096, so those rows at every m, in bf16 and in fp8 (every dtype, not
    # only the one read); each dtype keeps its grids whole (one row per distinct m and n: the n = 1024 rows at
    # m = 1, 2, 4 and n = 8192 at m = 1); nvfp4's lone row stays (a dtype check must still see the dtype)
    expected = {(dtype, m, n) for dtype in ("bf16", "fp8") for n in (2048, 4096) for m in (1, 2, 4)}
    expected |= {(dtype, m, 1024) for dtype in ("bf16", "fp8") for m in (1, 2, 4)}
    expected |= {("bf16", 1, 8192), ("fp8", 1, 8192), ("nvfp4", 1, 1024)}
    assert kept == expected and keep.sum() == 21
    # the kept rows give the same curve as the whole table
    trimmed = OpTable(OpKind.GEMM, {"dtype": table.categorical["dtype"][keep]},
                      {col: values[keep] for col, values in table.numeric.items()}, table.latency_us[keep])
    for dtype in ("bf16", "fp8"):
        whole = table.curve("m", {"n": 3000, "k": 4096}, {"dtype": dtype})
        assert trimmed.curve("m", {"n": 3000, "k": 4096}, {"dtype": dtype}) == whole


def test_tp_degrees_divide_the_heads():
    assert tp_degrees(32) == [1, 2, 4, 8, 16, 32] and tp_degrees(128)[-1] == 128 and 3 not in tp_degrees(128)


def _spec(tables: OperatorTables) -> GpuSpec:
    return GpuSpec(name="h200-sxm", peak_flops=989e12, hbm_Bps=4.8e12, hbm_bytes=141e9, hbm_efficiency=0.74,
                   gemm_efficiency=0.7, attention_efficiency=0.6, iteration_overhead_s=3e-4, kernel_floor_s=2.41e-6,
                   operator_tables=tables)


def _comparable(terms) -> dict:
    out = terms.as_ms()
    out["term_sources"] = {key: value.split(" (")[0] for key, value in out["term_sources"].items()}
    return out


@pytest.mark.slow
def test_model_steps_read_identically_from_the_trimmed_and_the_whole_shipped_set():
    full = load_operator_tables(shipped_dir() / "ops" / "h200-sxm" / "sglang-0.5.14")
    trimmed, counts = trim_tables(full, KINDS, models=MODELS)
    assert counts[OpKind.GEMM][0] < 0.3 * counts[OpKind.GEMM][1]           # most rows go
    assert counts[OpKind.MOE][0] < 0.2 * counts[OpKind.MOE][1]
    shapes = [BatchShape.uniform(decodes, context, prefill_tokens=chunk, prefill_context=earlier)
              for decodes, context, chunk, earlier in itertools.product((0, 37, 300), (3000, 90000),
                                                                        (0, 1, 9000), (0, 5000))]
    shapes = [shape for shape in shapes if shape.new_tokens > 0]
    built = 0
    for name in MODELS:
        base = get_model(name)
        for tp, weight, cache in itertools.product(tp_degrees(base.heads_q), ("bf16", "fp8"), ("bf16", "fp8")):
            geometry = base.with_weight_dtype(weight) if weight != base.weight_dtype else base
            geometry = geometry.with_cache_dtype(cache) if cache != geometry.cache_dtype else geometry
            for layout in ("replicated", "tpla") if geometry.is_mla else ("replicated",):
                whole = StepTimeModel(geometry, _spec(full), tp, kv_layout=layout)
                part = StepTimeModel(geometry, _spec(trimmed), tp, kv_layout=layout)
                assert whole.notes == part.notes
                for shape in shapes:
                    assert _comparable(part.iteration(shape)) == _comparable(whole.iteration(shape)), \
                        (name, tp, weight, cache, layout, shape)
                built += 1
    assert built == 8 * 4 * 2 + 6 * 4                     # deepseek-v3: 8 TP degrees x 4 dtypes x 2 layouts


def test_the_shipped_trimmed_sets_say_so_and_keep_their_measured_row_counts():
    """Every set `calib import aiconfigurator --trim` wrote says it was trimmed, how to get every row, and how many
    rows each trimmed kind had."""
    import yaml
    trimmed = [path.parent for path in sorted((shipped_dir() / "ops").glob("*/*/tables.yaml"))
               if "trimmed" in yaml.safe_load(path.read_text())["provenance"]]
    assert len(trimmed) >= 12
    for folder in trimmed:
        manifest = yaml.safe_load((folder / "tables.yaml").read_text())
        assert "without --trim" in manifest["provenance"]["trimmed"]
        for kind, entry in manifest["tables"].items():
            if kind in ("gemm", "moe"):
                assert entry["rows"] <= entry["rows_measured"], (folder, kind)


@pytest.mark.slow
def test_the_shipped_trimmed_sets_hold_every_row_the_step_model_reads_now():
    """Each trimmed set records the read set it was trimmed for; the step model's reads today (a new model, a new
    composition or kernel kind would change them) must be the same, else the set lacks rows and must be re-imported:
    `python -m simroute.calib.trim` does so from aiconfigurator-core. The reads depend on a set's contents only
    through which kinds and dtypes it holds, so one set of each recorded read set is recomputed."""
    import yaml

    from simroute.calib.trim import model_reads, reads_digest, shipped_trimmed_sets
    by_digest: dict[str, list] = {}
    for folder in shipped_trimmed_sets():
        digest = yaml.safe_load((folder / "tables.yaml").read_text())["provenance"].get("trimmed_for_reads")
        assert digest and digest.startswith("sha256:"), folder
        by_digest.setdefault(digest, []).append(folder)
    for digest, folders in by_digest.items():
        now = reads_digest(model_reads(load_operator_tables(folders[0])))
        assert now == digest, (f"the step model now reads rows the trimmed sets {', '.join(map(str, folders))} were "
                               "not trimmed for: re-import them with `python -m simroute.calib.trim`")
