"""Deterministic flow hashing for ECMP (never Python's salted hash()).

splitmix64 finaliser: a cheap, well-mixed 64-bit integer mixer, standing in for the switch ASIC's
hash (HPCC's ns-3 uses Murmur3 seeded by the switch id; any good mixer gives the same statistics).
"""

from __future__ import annotations

M64 = (1 << 64) - 1
ROCE_DPORT = 4791
UDP = 17
SPORT_MIN, SPORT_MAX = 49152, 65535


def mix64(x: int) -> int:
    """SplitMix64 finaliser of a Python int (wraps to 64 bits): the one integer hash of simroute."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def flow_key(src: int, dst: int, sport: int, dport: int = ROCE_DPORT, proto: int = UDP) -> int:
    """Hash of the RoCEv2 5-tuple (GPU indices stand for the IP addresses)."""
    return mix64(mix64((src << 32) | dst) ^ ((sport << 24) | (dport << 8) | proto))
