"""KV-cache presses named as kvpress names them, each a kvfold policy spec.

    press = SnapKVPress(compression_ratio=0.8)   # drop 80% of the context's entries
    str(press)                                   # 'snapkv:budget=0.2,window=64,kernel=5'
    model.generate(prompt, kv=press)             # or kv="snapkv:budget=0.2"

compression_ratio is the share removed, so budget = 1 - compression_ratio
(kvfold keeps that share of the tokens seen). Parameters keep kvpress's
names and defaults where kvfold has the same knob; kvfold's own methods
(LOOK-M, CSP, PrefixKV, block-wise prefill, LightKV, FastV, ToMe, ...) come
with their own parameters. `kvfold policies` (or kvfold.policies()) lists
every spec; any spec string is accepted wherever a press is.
"""
from __future__ import annotations

from typing import Optional


class Press:
    """A KV policy: its spec is what kvfold runs (`str(press)`)."""

    def spec(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.spec()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec()!r})"


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ",".join(_fmt(x) for x in v)
    return str(v)


def _spec(preset: str, **keys) -> str:
    body = ",".join(f"{k}={_fmt(v)}" for k, v in keys.items() if v is not None)
    return f"{preset}:{body}" if body else preset


class ScorerPress(Press):
    """A press that keeps 1 - compression_ratio of the context's entries by
    a score (kvpress's ScorerPress)."""

    preset = ""

    def __init__(self, compression_ratio: float = 0.0):
        if not 0.0 <= compression_ratio < 1.0:
            raise ValueError(f"compression_ratio {compression_ratio} out of [0, 1)")
        self.compression_ratio = compression_ratio

    @property
    def budget(self) -> float:
        return round(1.0 - self.compression_ratio, 9)

    def keys(self) -> dict:
        return {}

    def spec(self) -> str:
        return _spec(self.preset, budget=self.budget, **self.keys())


class KnormPress(ScorerPress):
    """Keys of smallest L2 norm kept."""
    preset = "knorm"


class KeyDiffPress(ScorerPress):
    """Keys least similar to the mean key kept (question-agnostic)."""
    preset = "keydiff"


class TOVAPress(ScorerPress):
    """The prompt's last query's attention, averaged over the heads."""
    preset = "tova"


class KVzipPress(ScorerPress):
    """The most attention an entry gets while the model repeats the context."""
    preset = "kvzip"


class RandomPress(ScorerPress):
    preset = "random"

    def __init__(self, compression_ratio: float = 0.0, seed: int = 1):
        super().__init__(compression_ratio)
        self.seed = seed

    def keys(self) -> dict:
        return {"seed": self.seed}


class StreamingLLMPress(ScorerPress):
    """Attention sinks and the most recent entries."""
    preset = "streaming"

    def __init__(self, compression_ratio: float = 0.0, n_sink: int = 4):
        super().__init__(compression_ratio)
        self.n_sink = n_sink

    def keys(self) -> dict:
        return {"sinks": self.n_sink}


class SnapKVPress(ScorerPress):
    """Attention of the prompt's last window_size queries, pooled (the
    question must be in the compressed prompt)."""
    preset = "snapkv"

    def __init__(self, compression_ratio: float = 0.0, window_size: int = 64, kernel_size: int = 5):
        super().__init__(compression_ratio)
        self.window_size, self.kernel_size = window_size, kernel_size

    def keys(self) -> dict:
        return {"window": self.window_size, "kernel": self.kernel_size}


class PyramidKVPress(SnapKVPress):
    """SnapKV with more entries in lower layers (beta: the pyramid's slope)."""
    preset = "pyramidkv"

    def __init__(self, compression_ratio: float = 0.0, window_size: int = 64, kernel_size: int = 5, beta: int = 20):
        super().__init__(compression_ratio, window_size, kernel_size)
        self.beta = beta

    def keys(self) -> dict:
        return {**super().keys(), "beta": self.beta}


class ExpectedAttentionPress(ScorerPress):
    """Attention expected from the next n_future_positions queries
    (Gaussian queries with the prompt's statistics)."""
    preset = "expected"

    def __init__(self, compression_ratio: float = 0.0, n_future_positions: int = 512, n_sink: int = 4):
        super().__init__(compression_ratio)
        self.n_future_positions, self.n_sink = n_future_positions, n_sink

    def keys(self) -> dict:
        return {"sinks": self.n_sink, "future": self.n_future_positions}


class H2OPress(ScorerPress):
    """Heavy hitters (attention summed over every query) plus the recent share."""
    preset = "h2o"

    def __init__(self, compression_ratio: float = 0.0, recent: float = 0.5):
        super().__init__(compression_ratio)
        self.recent = recent

    def keys(self) -> dict:
        return {"recent": self.recent}


class RoCoPress(ScorerPress):
    preset = "roco"

    def __init__(self, compression_ratio: float = 0.0, recent: float = 0.3, n_sink: int = 4):
        super().__init__(compression_ratio)
        self.recent, self.n_sink = recent, n_sink

    def keys(self) -> dict:
        return {"recent": self.recent, "sinks": self.n_sink}


class LookMPress(ScorerPress):
    """LOOK-M: text prior, then merging of the evicted image entries."""
    preset = "lookm"

    def __init__(self, compression_ratio: float = 0.0, recent: float = 0.5, merge: str = "pivotal",
                 text_prior: int = 1):
        super().__init__(compression_ratio)
        self.recent, self.merge, self.text_prior = recent, merge, text_prior

    def keys(self) -> dict:
        return {"recent": self.recent, "merge": self.merge, "text_prior": self.text_prior}


class CSPPress(ScorerPress):
    """Cross-Self Pruning: same- and cross-modality attention ranked apart."""
    preset = "csp"

    def __init__(self, compression_ratio: float = 0.0, recent: float = 0.5, cross_ratio: float = 0.5, n: int = 1,
                 window: int = 0):
        super().__init__(compression_ratio)
        self.recent, self.cross_ratio, self.n, self.window = recent, cross_ratio, n, window

    def keys(self) -> dict:
        return {"recent": self.recent, "cross_ratio": self.cross_ratio, "n": self.n, "window": self.window}


class ElasticCachePress(ScorerPress):
    preset = "elastic"


class PrefixKVPress(ScorerPress):
    """PrefixKV: per-layer budgets from the layers' priority curves."""
    preset = "prefixkv"


class BlockwisePress(Press):
    """Block-wise prefill under a fixed budget of entries: the prompt in
    blocks (of `block` tokens, or "image"), evicted back to `budget` entries
    after each."""

    def __init__(self, budget: int = 1024, block="256", evict: str = "snapkv", question: bool = False):
        self.budget, self.block, self.evict, self.question = budget, block, evict, question

    def spec(self) -> str:
        return _spec("blockwise", budget=self.budget, block=self.block, evict=self.evict, question=self.question)


class _ReducePress(Press):
    """A reduce-stage method (image tokens merged or dropped inside the prefill)."""

    preset = ""

    def __init__(self, **keys):
        self._keys = keys

    def spec(self) -> str:
        return _spec(self.preset, **self._keys)


class LightKVPress(_ReducePress):
    """LightKV: image tokens merged inside the prefill after the given layers."""
    preset = "lightkv"

    def __init__(self, ratio: float = 0.5, layers: Optional[list] = None, windows: Optional[list] = None):
        super().__init__(ratio=ratio, layers=layers, windows=windows)


class FastVPress(_ReducePress):
    """FastV: after layer k - 1, the share r of image tokens least attended dropped."""
    preset = "fastv"

    def __init__(self, k: int = 2, r: float = 0.5):
        super().__init__(k=k, r=r)


class ToMePress(_ReducePress):
    preset = "tome"

    def __init__(self, ratio: float = 0.5, layers: Optional[list] = None):
        super().__init__(ratio=ratio, layers=layers)


class AdaKVPress(Press):
    """AdaKV: the kv heads of a layer share its budget by score, each keeping
    at least alpha_safeguard of it (around a ScorerPress)."""

    def __init__(self, press: ScorerPress, alpha_safeguard: float = 0.20):
        self.press, self.alpha_safeguard = press, alpha_safeguard

    def spec(self) -> str:
        return f"{self.press.spec()}+budget=adaptive:floor={_fmt(self.alpha_safeguard)}"


class DecodingPress(Press):
    """Compression while decoding too: base_press's rule run again every
    compression_interval tokens, back to target_size entries (None: the
    base press's share of the tokens seen). Unlike kvpress's, which leaves
    the prompt whole, kvfold's compress() (which generate and the pipeline
    call after the prompt) already cuts the prompt to that budget."""

    def __init__(self, base_press: ScorerPress, compression_interval: int = 512, target_size: Optional[int] = None):
        if target_size is not None and target_size < 2:  # a budget of 1 would read as the share 1.0
            raise ValueError(f"target_size {target_size}: at least 2 entries")
        self.base_press, self.compression_interval, self.target_size = base_press, compression_interval, target_size

    def spec(self) -> str:
        base = self.base_press
        keys = {"budget": self.target_size if self.target_size is not None else base.budget, **base.keys()}
        return f"{_spec(base.preset, **keys)}+decode=recompress:every={self.compression_interval}"


__all__ = [n for n, v in dict(globals()).items() if isinstance(v, type) and issubclass(v, Press) and n[0] != "_"]
