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

from dataclasses import dataclass, fields
from typing import ClassVar, Optional


class Press:
    """A KV policy: its spec is what kvfold runs (`str(press)`). The presses
    are dataclasses, as kvpress's are: `repr` shows their fields, and two
    presses with the same fields are equal."""

    def spec(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.spec()


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


def _keys(press, names: dict) -> dict:
    """The spec's keys, in names' order (field name -> spec key)."""
    return {key: getattr(press, name) for name, key in names.items()}


@dataclass
class ScorerPress(Press):
    """A press that keeps 1 - compression_ratio of the context's entries by
    a score (kvpress's ScorerPress). A subclass names its preset and which
    of its fields are spec keys (field name -> key)."""

    compression_ratio: float = 0.0
    preset: ClassVar[str] = ""
    spec_keys: ClassVar[dict] = {}

    def __post_init__(self):
        if not 0.0 <= self.compression_ratio < 1.0:
            raise ValueError(f"compression_ratio {self.compression_ratio} out of [0, 1)")

    @property
    def budget(self) -> float:
        return round(1.0 - self.compression_ratio, 9)

    def keys(self) -> dict:
        return _keys(self, self.spec_keys)

    def spec(self) -> str:
        return _spec(self.preset, budget=self.budget, **self.keys())


@dataclass
class KnormPress(ScorerPress):
    """Keys of smallest L2 norm kept."""
    preset: ClassVar[str] = "knorm"


@dataclass
class KeyDiffPress(ScorerPress):
    """Keys least similar to the mean key kept (question-agnostic)."""
    preset: ClassVar[str] = "keydiff"


@dataclass
class TOVAPress(ScorerPress):
    """The prompt's last query's attention, averaged over the heads."""
    preset: ClassVar[str] = "tova"


@dataclass
class KVzipPress(ScorerPress):
    """The most attention an entry gets while the model repeats the context."""
    preset: ClassVar[str] = "kvzip"


@dataclass
class KVzapPress(ScorerPress):
    """KVzip's scores predicted from each layer's hidden state as entries are
    written (kvpress's KVzapPress): a linear scorer per layer that `kvfold
    calibrate` fits for the model; scorer None reads the model's own
    (MODEL.kvzap beside it)."""
    scorer: Optional[str] = None
    preset: ClassVar[str] = "kvzap"
    spec_keys: ClassVar[dict] = {"scorer": "scorer"}


@dataclass
class RandomPress(ScorerPress):
    seed: int = 1
    preset: ClassVar[str] = "random"
    spec_keys: ClassVar[dict] = {"seed": "seed"}


@dataclass
class StreamingLLMPress(ScorerPress):
    """Attention sinks and the most recent entries."""
    n_sink: int = 4
    preset: ClassVar[str] = "streaming"
    spec_keys: ClassVar[dict] = {"n_sink": "sinks"}


@dataclass
class SnapKVPress(ScorerPress):
    """Attention of the prompt's last window_size queries, pooled (the
    question must be in the compressed prompt)."""
    window_size: int = 64
    kernel_size: int = 5
    preset: ClassVar[str] = "snapkv"
    spec_keys: ClassVar[dict] = {"window_size": "window", "kernel_size": "kernel"}


@dataclass
class PyramidKVPress(SnapKVPress):
    """SnapKV with more entries in lower layers (beta: the pyramid's slope)."""
    beta: int = 20
    preset: ClassVar[str] = "pyramidkv"
    spec_keys: ClassVar[dict] = {**SnapKVPress.spec_keys, "beta": "beta"}


@dataclass
class ExpectedAttentionPress(ScorerPress):
    """Attention expected from the next n_future_positions queries
    (Gaussian queries with the prompt's statistics)."""
    n_future_positions: int = 512
    n_sink: int = 4
    preset: ClassVar[str] = "expected"
    spec_keys: ClassVar[dict] = {"n_sink": "sinks", "n_future_positions": "future"}


@dataclass
class H2OPress(ScorerPress):
    """Heavy hitters (attention summed over every query) plus the recent share."""
    recent: float = 0.5
    preset: ClassVar[str] = "h2o"
    spec_keys: ClassVar[dict] = {"recent": "recent"}


@dataclass
class RoCoPress(ScorerPress):
    recent: float = 0.3
    n_sink: int = 4
    preset: ClassVar[str] = "roco"
    spec_keys: ClassVar[dict] = {"recent": "recent", "n_sink": "sinks"}


@dataclass
class LookMPress(ScorerPress):
    """LOOK-M: text prior, then merging of the evicted image entries."""
    recent: float = 0.5
    merge: str = "pivotal"
    text_prior: int = 1
    preset: ClassVar[str] = "lookm"
    spec_keys: ClassVar[dict] = {"recent": "recent", "merge": "merge", "text_prior": "text_prior"}


@dataclass
class CSPPress(ScorerPress):
    """Cross-Self Pruning: same- and cross-modality attention ranked apart."""
    recent: float = 0.5
    cross_ratio: float = 0.5
    n: int = 1
    window: int = 0
    preset: ClassVar[str] = "csp"
    spec_keys: ClassVar[dict] = {"recent": "recent", "cross_ratio": "cross_ratio", "n": "n", "window": "window"}


@dataclass
class ElasticCachePress(ScorerPress):
    preset: ClassVar[str] = "elastic"


@dataclass
class PrefixKVPress(ScorerPress):
    """PrefixKV: per-layer budgets from the layers' priority curves."""
    preset: ClassVar[str] = "prefixkv"


@dataclass
class BlockwisePress(Press):
    """Block-wise prefill under a fixed budget of entries: the prompt in
    blocks (of `block` tokens, or "image"), evicted back to `budget` entries
    after each."""
    budget: int = 1024
    block: str = "256"
    evict: str = "snapkv"
    question: bool = False

    def spec(self) -> str:
        return _spec("blockwise", budget=self.budget, block=self.block, evict=self.evict, question=self.question)


class _ReducePress(Press):
    """A reduce-stage method (image tokens merged or dropped inside the
    prefill): every field is a spec key of its own name."""

    preset: ClassVar[str] = ""

    def spec(self) -> str:
        return _spec(self.preset, **{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass
class LightKVPress(_ReducePress):
    """LightKV: image tokens merged inside the prefill after the given layers."""
    ratio: float = 0.5
    layers: Optional[list] = None
    windows: Optional[list] = None
    preset: ClassVar[str] = "lightkv"


@dataclass
class FastVPress(_ReducePress):
    """FastV: after layer k - 1, the share r of image tokens least attended dropped."""
    k: int = 2
    r: float = 0.5
    preset: ClassVar[str] = "fastv"


@dataclass
class ToMePress(_ReducePress):
    ratio: float = 0.5
    layers: Optional[list] = None
    preset: ClassVar[str] = "tome"


@dataclass
class AdaKVPress(Press):
    """AdaKV: the kv heads of a layer share its budget by score, each keeping
    at least alpha_safeguard of it (around a ScorerPress)."""
    press: ScorerPress
    alpha_safeguard: float = 0.20

    def spec(self) -> str:
        return f"{self.press.spec()}+budget=adaptive:floor={_fmt(self.alpha_safeguard)}"


@dataclass
class ThresholdPress(Press):
    """No budget: every entry whose score under press clears threshold is
    kept, and the last sliding_window_size of every head (kvpress's
    ThresholdPress; the scale is press's scores). With decoding, the
    threshold is applied again every sliding_window_size decoded tokens
    (kvfold's +decode=recompress)."""
    press: ScorerPress
    threshold: float = 0.0
    sliding_window_size: int = 128
    decoding: bool = False

    def spec(self) -> str:
        base = _spec(self.press.preset, **self.press.keys())
        out = f"{base}+budget=threshold:tau={_fmt(float(self.threshold))},last={self.sliding_window_size}"
        return out + (f"+decode=recompress:every={max(1, self.sliding_window_size)}" if self.decoding else "")


@dataclass
class DecodingPress(Press):
    """Compression while decoding too: base_press's rule run again every
    compression_interval tokens, back to target_size entries (None: the
    base press's share of the tokens seen). Unlike kvpress's, which leaves
    the prompt whole, kvfold's compress() (which generate and the pipeline
    call after the prompt) already cuts the prompt to that budget."""
    base_press: ScorerPress
    compression_interval: int = 512
    target_size: Optional[int] = None

    def __post_init__(self):
        if self.target_size is not None and self.target_size < 2:  # a budget of 1 would read as the share 1.0
            raise ValueError(f"target_size {self.target_size}: at least 2 entries")

    def spec(self) -> str:
        base = self.base_press
        keys = {"budget": self.target_size if self.target_size is not None else base.budget, **base.keys()}
        return f"{_spec(base.preset, **keys)}+decode=recompress:every={self.compression_interval}"


__all__ = [n for n, v in dict(globals()).items() if isinstance(v, type) and issubclass(v, Press) and n[0] != "_"]
