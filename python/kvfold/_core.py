"""Models, sessions and generation over the C library (kvfold._lib)."""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import Iterator, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._lib import lib

STATUS_NAMES = ("ok", "invalid_arg", "io", "format", "unsupported", "shape", "context", "nomem", "internal",
                "buffer")

# kvf_tag as numpy sees it: views of the library's tag arrays.
TAG_DTYPE = np.dtype([("pos", "<i4"), ("modality", "<i2"), ("media", "<i2"), ("row", "<i2"), ("col", "<i2")])

# The media of a prompt: image files, bytes, or (h, w, 3) uint8 arrays.
ImageLike = Union[str, os.PathLike, bytes, np.ndarray]
Message = dict  # {"role": ..., "content": ...}


class KVFoldError(RuntimeError):
    """A kvfold call failed. `status` is the library's enum kvf_status
    (`status_name` its name: "format", "invalid_arg", ...), the message the
    library's own (kvf_last_error)."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        super().__init__(f"{message} ({self.status_name})" if message else self.status_name)


def check(st: int, what: str = "") -> None:
    """Raises KVFoldError for a status other than KVF_OK."""
    if st != _lib.KVF_OK:
        msg = lib.kvf_last_error().decode(errors="replace")
        raise KVFoldError(st, f"{what}: {msg}" if what else msg)


def _b(s: Optional[Union[str, os.PathLike]]) -> Optional[bytes]:
    return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else s.encode()


def _s(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else b.decode(errors="replace")


def _view(ptr, n: int, dtype, owner) -> np.ndarray:
    """A read-only numpy view of n items at ptr (empty for NULL) that keeps
    owner, the object whose memory it is, alive."""
    if not ptr or n <= 0:
        return np.empty(0, dtype=dtype)
    raw = (ctypes.c_uint8 * (n * np.dtype(dtype).itemsize)).from_address(ctypes.cast(ptr, ctypes.c_void_p).value)
    raw._owner = owner  # the array's base is raw
    a = np.frombuffer(raw, dtype=dtype, count=n)
    a.flags.writeable = False
    return a


def _copy(ptr, n: int, dtype) -> np.ndarray:
    """A copy of n items at ptr: for arrays the library moves as the object changes."""
    return _view(ptr, n, dtype, None).copy()


class _Handle:
    """An owned library object, freed once: by close(), a with block's end,
    or garbage collection."""

    _free = None  # the library's *_free

    def __init__(self, ptr: int):
        self._ptr = ctypes.c_void_p(ptr)

    @property
    def ptr(self) -> ctypes.c_void_p:
        if not self._ptr:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), ctypes.c_void_p()
        if ptr:
            type(self)._free(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()


class Image(_Handle):
    """A decoded image (PNG, JPEG, GIF, WebP, PPM), 8-bit RGB."""

    _free = lib.kvf_image_free

    def __init__(self, source: ImageLike, max_pixels: int = 0):
        out = ctypes.c_void_p()
        if isinstance(source, np.ndarray):
            a = np.ascontiguousarray(source, dtype=np.uint8)
            if a.ndim != 3 or a.shape[2] != 3:
                raise ValueError(f"an image array must be (h, w, 3) uint8, not {a.shape}")
            check(lib.kvf_image_from_rgb(a.shape[1], a.shape[0], a.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                         ctypes.byref(out)), "image")
        elif isinstance(source, (bytes, bytearray)):
            buf = bytes(source)
            check(lib.kvf_image_load_memory(buf, len(buf), max_pixels, ctypes.byref(out)), "image")
        else:
            check(lib.kvf_image_load(_b(source), max_pixels, ctypes.byref(out)), f"image {source}")
        super().__init__(out.value)

    @property
    def pixels(self) -> np.ndarray:
        """The pixels [h][w][3] (a read-only view; the image stays alive with it)."""
        h, w = lib.kvf_image_height(self.ptr), lib.kvf_image_width(self.ptr)
        return _view(lib.kvf_image_rgb(self.ptr), h * w * 3, np.uint8, self).reshape(h, w, 3)


class Media(_Handle):
    """An encoded image, video item or pseudo-image: embeddings that replace
    one `<image>` (or, a video's items together, one `<video>`) of a prompt."""

    _free = lib.kvf_media_free

    @property
    def n_tokens(self) -> int:
        return lib.kvf_media_n_tokens(self.ptr)


class Sampler(_Handle):
    """Temperature, top-k, top-p, min-p and the repeat penalty, as llama.cpp's
    sampler chain; temperature <= 0 is greedy."""

    _free = lib.kvf_sampler_free

    def __init__(self, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 seed: int = 42, repeat_penalty: float = 1.0, repeat_last_n: int = 64):
        sp = lib.kvf_sampler_default_params()
        sp.temp, sp.top_k, sp.top_p, sp.min_p, sp.seed = temperature, top_k, top_p, min_p, seed
        sp.penalty_repeat, sp.penalty_last_n = repeat_penalty, repeat_last_n
        out = ctypes.c_void_p()
        check(lib.kvf_sampler_init(ctypes.byref(sp), ctypes.byref(out)), "sampler")
        super().__init__(out.value)

    def sample(self, logits: np.ndarray) -> int:
        a = np.ascontiguousarray(logits, dtype=np.float32)
        tok = ctypes.c_int32()
        check(lib.kvf_sampler_sample(self.ptr, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), a.size,
                                     ctypes.byref(tok)), "sample")
        return tok.value

    def accept(self, token: int) -> None:
        lib.kvf_sampler_accept(self.ptr, token)


def _kv_types(kv_type: str, type_k: Optional[str], type_v: Optional[str]) -> tuple:
    """enum kvf_kv_type of the keys and of the values: type_k or type_v where given, else kv_type."""
    k, v = ctypes.c_int(), ctypes.c_int()
    check(lib.kvf_kv_type_parse(_b(type_k or kv_type), ctypes.byref(k)), "type_k" if type_k else "kv_type")
    check(lib.kvf_kv_type_parse(_b(type_v or kv_type), ctypes.byref(v)), "type_v" if type_v else "kv_type")
    return k.value, v.value


class Model(_Handle):
    """Model weights (a GGUF file, or a Hugging Face directory), shared by
    every session made from it.

        with kvfold.Model("smollm2-135m-instruct-q4_1.gguf") as model:
            print(model.generate("The capital of France is", max_tokens=8))
    """

    _free = lib.kvf_model_free

    def __init__(self, path: Union[str, os.PathLike], mmproj: Optional[Union[str, os.PathLike]] = None,
                 threads: Optional[int] = None, vocab_only: bool = False, image_min_tokens: int = 0,
                 image_max_tokens: int = 0, repack: bool = True):
        mp = lib.kvf_model_default_params()
        mp.n_threads = threads or 0
        self._mmproj = _b(mmproj)  # kept alive for the call
        mp.mmproj, mp.vocab_only, mp.repack = self._mmproj, vocab_only, repack
        mp.image_min_tokens, mp.image_max_tokens = image_min_tokens, image_max_tokens
        out = ctypes.c_void_p()
        check(lib.kvf_model_load(_b(path), ctypes.byref(mp), ctypes.byref(out)), f"model {path}")
        super().__init__(out.value)
        self._sessions = weakref.WeakSet()  # closed with the model: they cannot run without it
        self._pieces = {}  # token_bytes' answers: generation asks for each token once a step
        info = _lib.ModelInfo()
        lib.kvf_model_get_info(self.ptr, ctypes.byref(info))
        self.info = {name: (_s(v) if isinstance(v, bytes) else list(v) if name == "rope_sections" else v)
                     for name, v in ((f, getattr(info, f)) for f, _ in info._fields_)}

    def close(self) -> None:
        """Frees the weights, closing the sessions still open on them first."""
        for session in list(getattr(self, "_sessions", ())):
            session.close()
        super().close()

    @property
    def n_vocab(self) -> int:
        return self.info["n_vocab"]

    # ---------------------------------------------------------- tokenizer --

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """The token ids of text (BOS first when the tokenizer adds one and
        add_bos; special: control tokens' text becomes their ids)."""
        data = text.encode()
        n = ctypes.c_int32()
        st = lib.kvf_tokenize(self.ptr, data, len(data), None, 0, add_bos, special, ctypes.byref(n))
        if st == _lib.KVF_OK:
            return []
        if st != _lib.KVF_ERR_BUFFER:
            check(st, "tokenize")
        ids = (ctypes.c_int32 * n.value)()
        check(lib.kvf_tokenize(self.ptr, data, len(data), ids, n.value, add_bos, special, ctypes.byref(n)),
              "tokenize")
        return list(ids[:n.value])

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The bytes a token prints as (special tokens: none unless special)."""
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            piece = self._pieces[key] = self._token_bytes(token, special)
        return piece

    def _token_bytes(self, token: int, special: bool) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = ctypes.c_int32()
        st = lib.kvf_token_to_piece(self.ptr, token, buf, len(buf), special, ctypes.byref(n))
        if st == _lib.KVF_ERR_BUFFER:
            buf = ctypes.create_string_buffer(n.value)
            st = lib.kvf_token_to_piece(self.ptr, token, buf, len(buf), special, ctypes.byref(n))
        check(st, "token_to_piece")
        return buf.raw[:n.value]

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        return b"".join(self.token_bytes(t, special) for t in tokens).decode(errors="replace")

    def is_eog(self, token: int) -> bool:
        return lib.kvf_token_is_eog(self.ptr, token)

    def apply_chat_template(self, messages: Sequence[Message], template: Optional[str] = None,
                            add_generation_prompt: bool = True) -> str:
        """messages ({"role", "content"}) in the model's chat template (or the
        one named: llama2, vicuna, chatml, gemma)."""
        keep = [(_b(m["role"]), _b(m["content"])) for m in messages]
        arr = (_lib.ChatMessage * max(len(keep), 1))(*(_lib.ChatMessage(r, c) for r, c in keep))
        n = ctypes.c_int32()
        tpl = _b(template)
        size = 256 + sum(len(c) + 64 for _, c in keep)
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            st = lib.kvf_chat_apply(self.ptr, tpl, arr, len(keep), add_generation_prompt, buf, size, ctypes.byref(n))
            if st != _lib.KVF_ERR_BUFFER:
                break
            size = n.value
        check(st, "chat template")
        return buf.raw[:n.value].decode(errors="replace")

    # -------------------------------------------------------------- media --

    def encode_image(self, image: ImageLike, threads: Optional[int] = None) -> Media:
        """The vision tower's embeddings of one image (for a prompt's `<image>`)."""
        with Image(image) as img:
            out = ctypes.c_void_p()
            check(lib.kvf_media_encode_image(self.ptr, img.ptr, _lib.KVF_MOD_IMAGE, threads or 0, ctypes.byref(out)),
                  "encode image")
        return Media(out.value)

    def encode_video(self, frames: Sequence[ImageLike], fps: float = 2.0, threads: Optional[int] = None) -> list[Media]:
        """A video's items (for a prompt's `<video>`), from its frames in order."""
        imgs = [Image(f) for f in frames]
        try:
            arr = (ctypes.c_void_p * len(imgs))(*(i.ptr for i in imgs))
            out = (ctypes.c_void_p * len(imgs))()
            n = ctypes.c_int()
            check(lib.kvf_media_encode_video(self.ptr, arr, len(imgs), 0, fps, threads or 0, out, ctypes.byref(n)),
                  "encode video")
        finally:
            for i in imgs:
                i.close()
        return [Media(out[i]) for i in range(n.value)]

    def kv_position_bytes(self, kv_type: str = "f16", type_k: Optional[str] = None,
                          type_v: Optional[str] = None) -> int:
        """Bytes one position takes in a full cache of this model stored as
        kv_type (or type_k/type_v): a key row, a value row and a tag in every
        layer and kv head."""
        k, v = _kv_types(kv_type, type_k, type_v)
        out = ctypes.c_size_t()
        check(lib.kvf_kv_position_bytes(self.ptr, k, v, ctypes.byref(out), None), "kv_position_bytes")
        return out.value

    def kv_compress_positions(self, kv: Optional[str], n_context: int) -> int:
        """Positions a cache of n_context positions holds beyond them while
        kv's compression runs (KVzip's reconstruction repeats the context
        after it, a chunk at a time); 0 for a rule without such a pass."""
        out = ctypes.c_int32()
        check(lib.kvf_kv_compress_positions(self.ptr, _b(kv), n_context, ctypes.byref(out)),
              "kv_compress_positions")
        return out.value

    def kvzap_calibrate(self, corpus: Sequence[str], path: Optional[str] = None, samples: int = 256, test: int = 8,
                        span: int = 512, per_span: int = 256, alpha: float = 1.0, seed: int = 0,
                        threads: int = 0, progress=None) -> dict:
        """Fits KVzap's scorer for this model on the texts of corpus (the
        policy kvzap reads it) and writes it to path (default: the model's
        own, MODEL.kvzap beside it, where `kvzap` without scorer= looks).
        progress(done, total), if given, is called after each span; a false
        result stops, and the fit uses the spans done. Returns the file and
        what was measured on held-out spans: R^2 and the rank correlation
        with KVzip+'s scores, per layer (None without a test)."""
        p = lib.kvf_kvzap_default_params()
        p.samples, p.test, p.span, p.per_span, p.alpha, p.seed = samples, test, span, per_span, alpha, seed
        p.n_threads = threads
        if progress is not None:
            p.progress = _lib.KVZAP_PROGRESS(lambda done, total, _user: bool(progress(done, total)))
        texts = (ctypes.c_char_p * len(corpus))(*[t.encode("utf-8") for t in corpus])
        out = path if path is not None else lib.kvf_kvzap_default_path(self.ptr).decode()
        rep = _lib.KvzapReport()
        check(lib.kvf_kvzap_calibrate(self.ptr, texts, len(corpus), ctypes.byref(p), _b(out), ctypes.byref(rep)),
              "kvzap_calibrate")

        def per_layer(a):
            return [None if v != v else float(v) for v in a[:rep.n_layer]]
        return {"scorer": out, "samples": rep.samples, "test": rep.test, "rows": rep.rows,
                "r2": per_layer(rep.r2), "spearman": per_layer(rep.spearman)}

    # ----------------------------------------------------------- sessions --

    def session(self, kv: Union[str, "object", None] = None, n_ctx: int = 0, n_batch: int = 512,
                threads: Optional[int] = None, kv_type: str = "f16", kv_budget: float = 0.0, kv_gather: int = 0,
                kv_swa_full: bool = False, type_k: Optional[str] = None,
                type_v: Optional[str] = None) -> "Session":
        """A session (KV cache, logits) on this model. kv: a KV policy, a press
        (kvfold.presses) or a spec string ("snapkv:budget=0.2"); None: the
        full cache. kv_type: how keys and values are stored ("f16", "f32",
        "q8_0", "q4_0", "q4_0h"); type_k, type_v: the keys' or the values' alone
        (keys also "q4_0s", q4_0h of keys smoothed per channel)."""
        return Session(self, kv, n_ctx, n_batch, threads, kv_type, kv_budget, kv_gather, kv_swa_full, type_k,
                       type_v)

    def load_session(self, path: Union[str, os.PathLike], threads: Optional[int] = None,
                     n_ctx_max: int = 0) -> "Session":
        """A session saved by Session.save (on this model). A file naming a
        context over the model's trained one loads only up to n_ctx_max."""
        out = ctypes.c_void_p()
        check(lib.kvf_session_load(self.ptr, _b(path), threads or 0, n_ctx_max, ctypes.byref(out)),
              f"session {path}")
        return Session._wrap(self, out.value)

    def generate(self, prompt: Union[str, Sequence[Message]], images: Sequence[ImageLike] = (),
                 max_tokens: int = 128, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, seed: int = 42, stop: Union[str, Sequence[str], None] = None,
                 kv: Union[str, "object", None] = None, n_ctx: int = 0, stream: bool = False,
                 template: Optional[str] = None) -> Union[str, Iterator[str]]:
        """Text generated after prompt: a string (raw, BOS first), or chat
        messages (the model's chat template applied). images fill the
        prompt's `<image>` markers in order. The prompt's cache is compressed
        by kv (a press or spec) before the first token. stream: an iterator
        of pieces as they come. Greedy by default, as `kvfold generate`."""
        chat = not isinstance(prompt, str)
        text = self.apply_chat_template(prompt, template) if chat else prompt
        sess = self.session(kv=kv, n_ctx=n_ctx)
        media = [self.encode_image(i) for i in images]

        def run() -> Iterator[str]:
            try:
                sess.prefill_text(text, media=media, add_bos=True, special=chat)
                sess.compress()
                yield from sess.generate(max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                         seed=seed, stop=stop)
            finally:
                sess.close()
                for m in media:
                    m.close()
        return run() if stream else "".join(run())


class Session(_Handle):
    """A conversation's state: KV cache (compressed by its policy), logits
    and scratch. One thread at a time; sessions of one model may run on
    different threads."""

    _free = lib.kvf_session_free

    def __init__(self, model: Model, kv=None, n_ctx: int = 0, n_batch: int = 512, threads: Optional[int] = None,
                 kv_type: str = "f16", kv_budget: float = 0.0, kv_gather: int = 0, kv_swa_full: bool = False,
                 type_k: Optional[str] = None, type_v: Optional[str] = None):
        sp = lib.kvf_session_default_params()
        sp.n_ctx, sp.n_batch, sp.n_threads = n_ctx, n_batch, threads or 0
        self._spec = _b(str(kv)) if kv is not None else None
        sp.kv_spec = self._spec
        sp.type_k, sp.type_v = _kv_types(kv_type, type_k, type_v)
        sp.kv_budget, sp.kv_gather, sp.kv_swa_full = kv_budget, kv_gather, kv_swa_full
        out = ctypes.c_void_p()
        check(lib.kvf_session_init(model.ptr, ctypes.byref(sp), ctypes.byref(out)), "session")
        super().__init__(out.value)
        self._attach(model)

    def _attach(self, model: Model) -> None:
        self.model = model  # the model lives as long as its sessions, and closes them when closed
        model._sessions.add(self)
        self._prompt = None
        # A token generate() gave but did not decode (the last one): decoded
        # by the next call that goes on from it, so that the cache holds
        # every token given out without paying a pass nobody may need.
        self._pending = None

    @classmethod
    def _wrap(cls, model: Model, ptr: int) -> "Session":
        s = cls.__new__(cls)
        _Handle.__init__(s, ptr)
        s._attach(model)
        return s

    def _flush(self) -> None:
        tok, self._pending = self._pending, None
        if tok is not None:
            check(lib.kvf_session_decode(self.ptr, tok), "decode")

    def close(self) -> None:
        super().close()
        self.close_prompt()

    # ------------------------------------------------------------- input --

    def prefill(self, tokens: Sequence[int]) -> None:
        """Appends token ids (in batches of n_batch)."""
        self._flush()
        ids = np.ascontiguousarray(tokens, dtype=np.int32)
        check(lib.kvf_session_prefill(self.ptr, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), ids.size, None),
              "prefill")

    def prefill_text(self, text: str, media: Sequence[Media] = (), add_bos: bool = True,
                     special: bool = False) -> None:
        """Appends a prompt whose `<image>` / `<video>` markers take media in
        order. Runs a forward pass at a time where the policy allows it, so
        that Ctrl-C (KeyboardInterrupt) stops it between passes."""
        self._flush()
        arr = (ctypes.c_void_p * max(len(media), 1))(*(m.ptr for m in media))
        prompt = ctypes.c_void_p()
        check(lib.kvf_prompt_init(self.model.ptr, _b(text), arr, len(media), add_bos, special, ctypes.byref(prompt)),
              "prompt")
        self.close_prompt()
        self._prompt, self._media = prompt, list(media)  # the prompt borrows the media
        n, base = lib.kvf_prompt_n_tokens(prompt), self.n_past
        while self.n_past - base < n:
            # One forward pass a call: a part runs on to the end of the pass it starts.
            st = lib.kvf_session_prefill_prompt_part(self.ptr, prompt, self.n_past - base, 1)
            if st == _lib.KVF_ERR_UNSUPPORTED and self.n_past == base:  # a policy that needs the prompt whole
                check(lib.kvf_session_prefill_prompt(self.ptr, prompt, None), "prefill")
                return
            check(st, "prefill")

    def close_prompt(self) -> None:
        """Frees the last prompt prefill_text made (the session keeps it for a
        prompt prefilled in parts, and a copy goes on with it)."""
        prompt, self._prompt = getattr(self, "_prompt", None), None
        if prompt:
            lib.kvf_prompt_free(prompt)

    def compress(self) -> None:
        """Applies the KV policy to the cache now (after the prompt)."""
        self._flush()
        check(lib.kvf_session_compress(self.ptr), "compress")

    def decode(self, token: int) -> None:
        """Appends one token (the cache kept within budget by the policy)."""
        self._flush()
        check(lib.kvf_session_decode(self.ptr, token), "decode")

    def generate(self, max_tokens: int = 128, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, seed: int = 42, stop: Union[str, Sequence[str], None] = None) -> Iterator[str]:
        """Pieces of text sampled from the logits on, until an end-of-generation
        token, a stop string (cut, with what follows it), max_tokens or a
        full context. Each token is in the cache before its piece is given
        (the last one by the next call that goes on from it), so a caller
        may stop at any piece and continue the conversation. Ctrl-C
        (KeyboardInterrupt) stops it at the next token."""
        self._flush()
        stops = [s for s in ([stop] if isinstance(stop, str) else stop or []) if s]
        hold = max((len(s) - 1 for s in stops), default=0)  # characters a stop string may still complete
        raw, text = b"", ""  # bytes inside an unfinished character; characters not yet given
        model, n_vocab, n_ctx = self.model, self.model.n_vocab, self.n_ctx
        tok = ctypes.c_int32()
        with Sampler(temperature, top_k, top_p, min_p, seed) as sampler:
            for i in range(max_tokens):
                # From the session's logits in place: no array made per token.
                check(lib.kvf_sampler_sample(sampler.ptr, lib.kvf_session_logits(self.ptr), n_vocab,
                                             ctypes.byref(tok)), "sample")
                if model.is_eog(tok.value):
                    break
                sampler.accept(tok.value)
                raw += model.token_bytes(tok.value)
                whole = _complete_utf8(raw)
                raw, text = raw[len(whole):], text + whole.decode(errors="replace")
                cut = min((j for j in (text.find(s) for s in stops) if j >= 0), default=-1)
                last = cut >= 0 or i == max_tokens - 1 or lib.kvf_session_n_past(self.ptr) >= n_ctx - 1
                if last:
                    self._pending = tok.value
                else:
                    check(lib.kvf_session_decode(self.ptr, tok.value), "decode")
                if cut >= 0:
                    if cut:
                        yield text[:cut]
                    return
                if last:
                    break
                if len(text) > hold:
                    yield text[:len(text) - hold]
                    text = text[len(text) - hold:]
        if text or raw:
            yield text + raw.decode(errors="replace")

    # ----------------------------------------------------------- inspect --

    @property
    def logits(self) -> np.ndarray:
        """The logits after the last position [n_vocab]: a read-only view of
        the session's buffer, which keeps the session alive and holds the
        latest logits (copy it to keep these)."""
        self._flush()
        return _view(lib.kvf_session_logits(self.ptr), self.model.n_vocab, np.float32, self)

    @property
    def n_past(self) -> int:
        return lib.kvf_session_n_past(self.ptr)

    @property
    def n_ctx(self) -> int:
        return lib.kvf_session_n_ctx(self.ptr)

    @property
    def kv_spec(self) -> str:
        return _s(lib.kvf_session_kv_spec(self.ptr))

    # The library moves the arrays below as the session changes: copies.

    @property
    def tokens(self) -> np.ndarray:
        """The token id at every position so far (-1: media)."""
        return _copy(lib.kvf_session_tokens(self.ptr), self.n_past, np.int32)

    @property
    def tags(self) -> np.ndarray:
        """Every position's tag (pos, modality, media, row, col)."""
        return _copy(lib.kvf_session_tags(self.ptr), self.n_past, TAG_DTYPE)

    def kv_tags(self, layer: int, head: int) -> np.ndarray:
        """The tags of the entries (layer, kv head) keeps, in cache order."""
        n = ctypes.c_int()
        ptr = lib.kvf_session_kv_tags(self.ptr, layer, head, ctypes.byref(n))
        if not ptr:
            raise IndexError(f"layer {layer}, kv head {head} out of range")
        return _copy(ptr, n.value, TAG_DTYPE)

    def kept_positions(self) -> list[list[np.ndarray]]:
        """Per layer, per kv head: the true positions its cache keeps."""
        info = self.model.info
        return [[self.kv_tags(l, h)["pos"] for h in range(info["n_head_kv"])] for l in range(info["n_layer"])]

    def kv_merges(self, layer: int, head: int) -> np.ndarray:
        """[n][2]: (from, into) true positions a merging policy folded at (layer, kv head), in order (a copy)."""
        n = ctypes.c_int()
        ptr = lib.kvf_session_kv_merges(self.ptr, layer, head, ctypes.byref(n))
        return _copy(ptr, 2 * n.value, np.int32).reshape(-1, 2)

    def kv_layer_budget(self, layer: int) -> Optional[tuple[float, float]]:
        """(share of the tokens seen, Gini coefficient) where the policy
        searched per-layer budgets (prefixkv); None otherwise."""
        r, g = ctypes.c_double(), ctypes.c_double()
        return (r.value, g.value) if lib.kvf_session_kv_layer_budget(self.ptr, layer, ctypes.byref(r),
                                                                     ctypes.byref(g)) else None

    @property
    def kv_bytes(self) -> dict:
        """KV memory really allocated: now (kept), the peak, and what the full cache would hold."""
        return {"kept": lib.kvf_session_kv_bytes(self.ptr), "peak": lib.kvf_session_kv_peak_bytes(self.ptr),
                "full": lib.kvf_session_kv_full_bytes(self.ptr)}

    # ------------------------------------------------------------- state --

    def reset(self) -> None:
        self._pending = None
        lib.kvf_session_reset(self.ptr)

    def truncate(self, n: int) -> None:
        """Forgets the positions from n on (a token generate() left undecoded too)."""
        self._pending = None
        check(lib.kvf_session_truncate(self.ptr, n), "truncate")

    def copy(self) -> "Session":
        """A session in this one's state (compressed or not) that goes on alike."""
        self._flush()
        out = ctypes.c_void_p()
        check(lib.kvf_session_copy(self.ptr, ctypes.byref(out)), "copy")
        return Session._wrap(self.model, out.value)

    def fork(self, kv=None, kv_budget: float = 0.0) -> "Session":
        """This prefill under another policy (not yet compressed)."""
        self._flush()
        out = ctypes.c_void_p()
        check(lib.kvf_session_fork(self.ptr, _b(str(kv)) if kv is not None else None, kv_budget, ctypes.byref(out)),
              "fork")
        return Session._wrap(self.model, out.value)

    def save(self, path: Union[str, os.PathLike]) -> None:
        self._flush()
        check(lib.kvf_session_save(self.ptr, _b(path)), "save")

    def to_bytes(self) -> bytes:
        self._flush()
        size = lib.kvf_session_save_size(self.ptr)
        buf = ctypes.create_string_buffer(size)
        check(lib.kvf_session_save_buffer(self.ptr, buf, size), "save")
        return buf.raw

    @classmethod
    def from_bytes(cls, model: Model, data: bytes, threads: Optional[int] = None, n_ctx_max: int = 0) -> "Session":
        out = ctypes.c_void_p()
        check(lib.kvf_session_load_buffer(model.ptr, data, len(data), threads or 0, n_ctx_max, ctypes.byref(out)),
              "load")
        return cls._wrap(model, out.value)


def _complete_utf8(b: bytes) -> bytes:
    """The longest prefix of b that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(b)) + 1):
        c = b[-back]
        if c & 0xC0 != 0x80:  # a lead byte (or ASCII): is its character whole?
            need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
            return b if back >= need else b[:-back]
    return b


def policies() -> list[dict]:
    """Every KV policy preset and stage option (`kvfold policies`)."""
    out = []
    info = _lib.KvPolicyInfo()
    for i in range(lib.kvf_kv_policy_count()):
        check(lib.kvf_kv_policy_get(i, ctypes.byref(info)), "policy")
        out.append({f: _s(getattr(info, f)) if isinstance(getattr(info, f), bytes) else getattr(info, f)
                    for f, _ in info._fields_})
    return out


def check_spec(spec: str, budget: float = 0.0) -> None:
    """Raises KVFoldError (whose message lists what is valid) for a bad KV spec."""
    check(lib.kvf_kv_policy_check_budget(_b(spec), budget), "kv spec")


def question_aware(spec: str) -> bool:
    """Whether spec's policy scores entries with the prompt's last queries."""
    aware = ctypes.c_bool()
    check(lib.kvf_kv_policy_question_aware(_b(spec), ctypes.byref(aware)), "kv spec")
    return aware.value


def build_info() -> str:
    return _s(lib.kvf_build_info())


def simd_level() -> str:
    return _s(lib.kvf_simd_level())

