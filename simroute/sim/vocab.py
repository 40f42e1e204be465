"""The simulation's vocabulary: what a (chunk, request) decision can be, a request's status, why it dropped.

One module so that the recorder, the policies, the request flow and the output tables agree on codes and
names. The integer values are the codes stored in memory; the labels are what the output tables show.
`Primitive.ROUTE / FETCH / LOCAL` equal the model's predicate codes (`simroute.model.predicate`).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Primitive(IntEnum):
    """How one request attends one chunk."""

    ROUTE = 0          # the query travels to the holder, the partial comes back
    FETCH = 1          # the chunk's KV is copied to the requester, then attended locally
    LOCAL = 2          # the requester re-prefills the chunk itself
    RESIDENT = 3       # the requester already holds a copy (or one is being made there)
    FIRST_TOUCH = 4    # nobody holds the chunk: the requester prefills it (it is not a choice)

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


CHOICES = (Primitive.ROUTE, Primitive.FETCH, Primitive.LOCAL)   # what a policy may return


class Status(IntEnum):
    """Where a request is in its life."""

    PENDING = 0
    COMPLETED = 1
    DROPPED = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class DropReason(IntEnum):
    """Why a request did not run to completion (NONE while it has not been dropped)."""

    NONE = 0
    UNFINISHED = 1              # still running (or not started) when the run stopped at --until
    REQUESTER_OUT_OF_RANGE = 2  # the trace names a requester / prefill instance the cluster lacks
    UNKNOWN_CHUNK = 3           # the request attends a chunk id the chunk table lacks
    PARENT_DROPPED = 4          # a closed-loop request whose parent was dropped
    KV_NEVER_FITS = 5           # its KV exceeds what the instance's HBM leaves beside weights and chunks
    STALLED = 6                 # it arrived, yet the run ran out of events with it unfinished (no --until)
    THRASHED = 7                # preempted more than the engine's max_preemptions times (recompute thrash)
    OVER_WINDOW = 8             # its sequence exceeds the model's context window (the engine refuses it)

    @property
    def label(self) -> str:
        return _DROP_LABELS[self]

    @property
    def advice(self) -> str:
        """What a user can change so that such requests run (printed beside an incomplete run's count)."""
        return _DROP_ADVICE.get(self, "")


_DROP_LABELS = {DropReason.NONE: "", DropReason.UNFINISHED: "unfinished at --until",
                DropReason.REQUESTER_OUT_OF_RANGE: "requester out of range",
                DropReason.UNKNOWN_CHUNK: "unknown chunk id",
                DropReason.PARENT_DROPPED: "closed-loop parent dropped", DropReason.KV_NEVER_FITS: "KV never fits in HBM",
                DropReason.STALLED: "stalled", DropReason.THRASHED: "preempted too often",
                DropReason.OVER_WINDOW: "past the model's context window"}

_DROP_ADVICE = {
    DropReason.UNFINISHED: "the run stopped at --until before they finished; raise --until or lower the load",
    DropReason.REQUESTER_OUT_OF_RANGE: "the trace names more instances than the cluster has (instances = hosts x "
                                       "GPUs per host / tp): regenerate the trace for this cluster, or change "
                                       "--tp / --hosts",
    DropReason.UNKNOWN_CHUNK: "the trace's requests attend chunk ids its chunk table lacks; rebuild the trace",
    DropReason.PARENT_DROPPED: "their closed-loop parent was dropped first",
    DropReason.STALLED: "the engines held them with nothing left that could free room or finish them: a "
                        "simroute limitation; please report it with the command",
    DropReason.KV_NEVER_FITS: "a request's KV exceeds what one instance's HBM leaves beside the weights; raise --tp "
                              "or --hbm-gb, or pick a smaller model",
    DropReason.THRASHED: "their KV was preempted (and recomputed) over and over beside the rest of the batch: HBM "
                         "is far too small for the load; raise --tp or --hbm-gb, or lower the load",
    DropReason.OVER_WINDOW: "their prompt + chunks + output exceed the model's context window (summary.json "
                            "model_limits), which a serving engine refuses; --over-window drop said to drop them",
}


# A sequence's phase on an instance engine (plain ints: the engine compares them in its inner loop).
WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


class HolderMode(StrEnum):
    """Where a holder runs the routed partial attention it serves (`RunConfig.holder_mode`)."""

    INLINE = "inline"     # between / inside its own iterations
    STREAM = "stream"     # on a concurrent stream, slowing its own iterations by the interference share


HOLDER_MODES = tuple(mode.value for mode in HolderMode)

# TensorRT-LLM `moe_config.backend` values a run may name (`RunConfig.moe_backend`): those whose kernel the
# preset's own MoE rows do not time. TRTLLM is the TRT-LLM-gen fused MoE (`TRTLLMGenFusedMoE`, Blackwell only);
# the launches' other backends (DEEPGEMM on B200, CUTLASS on H100 / H200) are the preset's rows themselves.
MOE_BACKENDS = ("TRTLLM",)
# SGLang `--fp8-gemm-backend` values a run may name (`RunConfig.fp8_gemm_backend`): those whose kernel the preset's
# own fp8_block GEMM rows do not time. flashinfer_trtllm is FlashInfer's TRT-LLM-gen block-scaled FP8 GEMM
# (`gemm_fp8_nt_groupwise(backend="trtllm")`, Blackwell only); SGLang's default on B200 (DeepGEMM) is the rows
# themselves.
FP8_GEMM_BACKENDS = ("flashinfer_trtllm",)
