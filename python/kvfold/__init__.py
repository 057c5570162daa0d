"""kvfold: inference for (vision-)language models whose KV cache is
compressed while the model runs, from Python.

    import kvfold
    from kvfold.presses import SnapKVPress

    with kvfold.Model("smollm2-135m-instruct-q4_1.gguf") as model:
        print(model.generate("The capital of France is", max_tokens=16))
        print(model.generate([{"role": "user", "content": "Hi!"}], kv=SnapKVPress(compression_ratio=0.8)))
        with model.session(kv="snapkv:budget=0.2") as s:
            s.prefill_text("A long document ...")
            s.compress()
            print(s.kv_bytes, s.kv_tags(0, 0)["pos"])

The C library's whole API is bound one for one in kvfold._lib.
"""
from . import presses
from ._core import (KVFoldError, Image, Media, Model, Sampler, Session, build_info, check_spec, policies,
                    question_aware, simd_level)
from .pipeline import KVPressPipeline, pipeline

__version__ = "0.1.0"

__all__ = ["KVFoldError", "Image", "Media", "Model", "Sampler", "Session", "KVPressPipeline", "pipeline", "presses",
           "policies", "check_spec", "question_aware", "build_info", "simd_level", "__version__"]
