"""The C library and its declarations, one for one with include/kvfold.h.

Every KVF_API function is declared here with its argument and result types
(tests/python/test_binding.py checks the list against the header, and every
struct's size and field offsets against the C compiler's), so the two
cannot drift. ctypes releases the GIL for the length of each call.

The library is the package's own libkvfold.so (pip install builds it), or
the file KVFOLD_LIBRARY names (a build tree's, for the tests).
"""
import ctypes
import glob
import os
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int, c_int16, c_int32,
                    c_int64, c_size_t, c_uint64, c_uint8, c_void_p)


def _find_library():
    path = os.environ.get("KVFOLD_LIBRARY")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libkvfold.so*")), key=len)
    if not found:
        raise ImportError(f"kvfold: no libkvfold.so in {here} (install the package with pip, or set "
                          "KVFOLD_LIBRARY to a build's libkvfold.so)")
    return found[0]


lib = ctypes.CDLL(_find_library())

# enum kvf_status
KVF_OK, KVF_ERR_INVALID_ARG, KVF_ERR_IO, KVF_ERR_FORMAT, KVF_ERR_UNSUPPORTED, KVF_ERR_SHAPE, KVF_ERR_CONTEXT, \
    KVF_ERR_NOMEM, KVF_ERR_INTERNAL, KVF_ERR_BUFFER = range(10)
# enum kvf_modality, kvf_kv_type, kvf_rope_style
KVF_MOD_TEXT, KVF_MOD_IMAGE, KVF_MOD_VIDEO = range(3)
KVF_KV_F32, KVF_KV_F16, KVF_KV_Q8_0, KVF_KV_Q4_0, KVF_KV_Q4_0H, KVF_KV_Q4_0S = range(6)
KVF_ROPE_NORM, KVF_ROPE_NEOX = range(2)


class ModelParams(Structure):
    _fields_ = [("n_threads", c_int), ("mmproj", c_char_p), ("vocab_only", c_bool), ("image_min_tokens", c_int),
                ("image_max_tokens", c_int), ("repack", c_bool)]


class ModelInfo(Structure):
    _fields_ = [("arch", c_char_p), ("name", c_char_p), ("source", c_char_p), ("n_layer", c_int), ("n_embd", c_int),
                ("n_head", c_int), ("n_head_kv", c_int), ("head_dim", c_int), ("n_ff", c_int), ("n_vocab", c_int),
                ("n_ctx_train", c_int), ("sliding_window", c_int), ("rope_base", c_float),
                ("rope_base_local", c_float), ("norm_eps", c_float), ("rope_style", c_int),
                ("rope_sections", c_int * 3), ("rope_scaling", c_char_p), ("rope_scaling_factor", c_float),
                ("n_params", c_int64), ("weight_bytes", c_int64), ("weight_types", c_char_p),
                ("tokenizer", c_char_p), ("chat_template_name", c_char_p), ("bos", c_int32), ("eos", c_int32),
                ("has_vision", c_bool), ("vision_source", c_char_p), ("vision_tower", c_char_p),
                ("vision_projector", c_char_p), ("vision_image_size", c_int), ("vision_patch_size", c_int),
                ("vision_n_layer", c_int), ("vision_n_embd", c_int), ("vision_n_head", c_int),
                ("vision_n_ff", c_int), ("image_tokens", c_int), ("image_grid", c_int),
                ("image_bidirectional", c_bool), ("video_frames_per_item", c_int), ("decode_bytes", c_int64),
                ("kernels", c_char_p)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class Tag(Structure):
    _fields_ = [("pos", c_int32), ("modality", c_int16), ("media", c_int16), ("row", c_int16), ("col", c_int16)]


class SessionParams(Structure):
    _fields_ = [("n_ctx", c_int), ("n_batch", c_int), ("n_threads", c_int), ("kv_spec", c_char_p),
                ("type_k", c_int), ("type_v", c_int), ("kv_gather", c_int), ("kv_budget", c_double), ("kv_swa_full", c_bool)]


class KvMerge(Structure):
    _fields_ = [("from_", c_int32), ("into", c_int32)]


class KvPolicyInfo(Structure):
    _fields_ = [("stage", c_char_p), ("name", c_char_p), ("summary", c_char_p), ("paper", c_char_p),
                ("keys", c_char_p), ("defaults", c_char_p), ("question_aware", c_bool)]


class SamplerParams(Structure):
    _fields_ = [("temp", c_float), ("top_k", c_int), ("top_p", c_float), ("min_p", c_float), ("seed", c_uint64),
                ("penalty_repeat", c_float), ("penalty_last_n", c_int)]


# bool (*progress)(int done, int total, void *user) of struct kvf_kvzap_params
KVZAP_PROGRESS = ctypes.CFUNCTYPE(c_bool, c_int, c_int, c_void_p)


class KvzapParams(Structure):
    _fields_ = [("samples", c_int), ("test", c_int), ("span", c_int), ("per_span", c_int), ("alpha", c_double),
                ("seed", c_uint64), ("n_threads", c_int), ("progress", KVZAP_PROGRESS), ("user", c_void_p)]


KVF_KVZAP_MAX_LAYERS = 1024


class KvzapReport(Structure):
    _fields_ = [("n_layer", c_int), ("samples", c_int), ("test", c_int), ("rows", c_int64),
                ("r2", c_float * KVF_KVZAP_MAX_LAYERS), ("spearman", c_float * KVF_KVZAP_MAX_LAYERS)]


# Every public struct, by its C name, for the layout test.
STRUCTS = {"kvf_model_params": ModelParams, "kvf_model_info": ModelInfo, "kvf_chat_message": ChatMessage,
           "kvf_tag": Tag, "kvf_session_params": SessionParams, "kvf_kv_merge": KvMerge,
           "kvf_kv_policy_info": KvPolicyInfo, "kvf_sampler_params": SamplerParams,
           "kvf_kvzap_params": KvzapParams, "kvf_kvzap_report": KvzapReport}
# Fields whose Python name differs from C's (a Python keyword).
FIELD_NAMES = {("kvf_kv_merge", "from_"): "from"}

status = c_int
p = c_void_p  # the opaque handles: model, session, media, prompt, image, sampler
pp = POINTER(c_void_p)

# name: (result type, argument types), in the header's order.
FUNCTIONS = {
    "kvf_status_str": (c_char_p, [status]),
    "kvf_last_error": (c_char_p, []),
    "kvf_model_default_params": (ModelParams, []),
    "kvf_model_load": (status, [c_char_p, POINTER(ModelParams), pp]),
    "kvf_model_free": (None, [p]),
    "kvf_model_get_info": (None, [p, POINTER(ModelInfo)]),
    "kvf_tokenize": (status, [p, c_char_p, c_size_t, POINTER(c_int32), c_int32, c_bool, c_bool, POINTER(c_int32)]),
    "kvf_token_to_piece": (status, [p, c_int32, POINTER(c_char), c_int32, c_bool, POINTER(c_int32)]),
    "kvf_token_is_eog": (c_bool, [p, c_int32]),
    "kvf_chat_apply": (status, [p, c_char_p, POINTER(ChatMessage), c_int, c_bool, POINTER(c_char), c_int32,
                                POINTER(c_int32)]),
    "kvf_chat_templates": (c_char_p, []),
    "kvf_image_load": (status, [c_char_p, c_int64, pp]),
    "kvf_image_load_memory": (status, [c_void_p, c_size_t, c_int64, pp]),
    "kvf_image_from_rgb": (status, [c_int, c_int, POINTER(c_uint8), pp]),
    "kvf_image_free": (None, [p]),
    "kvf_image_width": (c_int, [p]),
    "kvf_image_height": (c_int, [p]),
    "kvf_image_rgb": (POINTER(c_uint8), [p]),
    "kvf_modality_str": (c_char_p, [c_int]),
    "kvf_media_encode_image": (status, [p, p, c_int, c_int, pp]),
    "kvf_media_encode_video": (status, [p, pp, c_int, c_int, c_double, c_int, pp, POINTER(c_int)]),
    "kvf_media_pseudo_image": (status, [p, c_char_p, c_int, c_int, c_float, c_uint64, pp]),
    "kvf_media_from_embd": (status, [p, POINTER(c_float), c_int, c_int, c_int, pp]),
    "kvf_media_free": (None, [p]),
    "kvf_media_n_tokens": (c_int, [p]),
    "kvf_media_is_synthetic": (c_bool, [p]),
    "kvf_media_modality": (c_int, [p]),
    "kvf_media_video_index": (c_int, [p]),
    "kvf_media_encode_ms": (c_double, [p]),
    "kvf_prompt_init": (status, [p, c_char_p, pp, c_int, c_bool, c_bool, pp]),
    "kvf_prompt_free": (None, [p]),
    "kvf_prompt_n_tokens": (c_int, [p]),
    "kvf_prompt_tags": (POINTER(Tag), [p]),
    "kvf_prompt_token": (c_int32, [p, c_int]),
    "kvf_prompt_is_synthetic": (c_bool, [p]),
    "kvf_kv_type_name": (c_char_p, [c_int]),
    "kvf_kv_type_parse": (status, [c_char_p, POINTER(c_int)]),
    "kvf_session_default_params": (SessionParams, []),
    "kvf_session_init": (status, [p, POINTER(SessionParams), pp]),
    "kvf_session_free": (None, [p]),
    "kvf_session_reset": (None, [p]),
    "kvf_session_truncate": (status, [p, c_int]),
    "kvf_session_prefill": (status, [p, POINTER(c_int32), c_int, POINTER(c_float)]),
    "kvf_session_prefill_prompt_part": (status, [p, p, c_int, c_int]),
    "kvf_session_prefill_prompt": (status, [p, p, POINTER(c_float)]),
    "kvf_session_prefill_embd": (status, [p, POINTER(c_float), POINTER(Tag), c_int, POINTER(c_float)]),
    "kvf_session_tags": (POINTER(Tag), [p]),
    "kvf_session_tokens": (POINTER(c_int32), [p]),
    "kvf_session_set_note": (status, [p, c_char_p]),
    "kvf_session_kv_spec": (c_char_p, [p]),
    "kvf_session_note": (c_char_p, [p]),
    "kvf_session_kv_tags": (POINTER(Tag), [p, c_int, c_int, POINTER(c_int)]),
    "kvf_session_kv_merges": (POINTER(KvMerge), [p, c_int, c_int, POINTER(c_int)]),
    "kvf_session_kv_layer_budget": (c_bool, [p, c_int, POINTER(c_double), POINTER(c_double)]),
    "kvf_session_fork": (status, [p, c_char_p, c_double, pp]),
    "kvf_session_copy": (status, [p, pp]),
    "kvf_session_save_size": (c_size_t, [p]),
    "kvf_session_save_buffer": (status, [p, c_void_p, c_size_t]),
    "kvf_session_save": (status, [p, c_char_p]),
    "kvf_session_load_buffer": (status, [p, c_void_p, c_size_t, c_int, c_int, pp]),
    "kvf_session_load": (status, [p, c_char_p, c_int, c_int, pp]),
    "kvf_session_compress": (status, [p]),
    "kvf_session_decode": (status, [p, c_int32]),
    "kvf_session_decode_batch": (status, [pp, POINTER(c_int32), c_int]),
    "kvf_session_logits": (POINTER(c_float), [p]),
    "kvf_session_n_past": (c_int, [p]),
    "kvf_session_n_ctx": (c_int, [p]),
    "kvf_session_kv_bytes": (c_size_t, [p]),
    "kvf_session_kv_peak_bytes": (c_size_t, [p]),
    "kvf_session_kv_peak_reset": (None, [p]),
    "kvf_session_kv_full_bytes": (c_size_t, [p]),
    "kvf_kv_position_bytes": (status, [p, c_int, c_int, POINTER(c_size_t), POINTER(c_size_t)]),
    "kvf_kv_compress_positions": (status, [p, c_char_p, c_int32, POINTER(c_int32)]),
    "kvf_session_kv_peak_entries": (c_int, [p]),
    "kvf_kv_policy_count": (c_int, []),
    "kvf_kv_policy_get": (status, [c_int, POINTER(KvPolicyInfo)]),
    "kvf_kv_policy_question_aware": (status, [c_char_p, POINTER(c_bool)]),
    "kvf_kv_policy_check": (status, [c_char_p]),
    "kvf_kv_policy_check_budget": (status, [c_char_p, c_double]),
    "kvf_kvzap_default_params": (KvzapParams, []),
    "kvf_kvzap_calibrate": (status, [p, POINTER(c_char_p), c_int, POINTER(KvzapParams), c_char_p,
                                     POINTER(KvzapReport)]),
    "kvf_kvzap_default_path": (c_char_p, [p]),
    "kvf_sampler_default_params": (SamplerParams, []),
    "kvf_sampler_init": (status, [POINTER(SamplerParams), pp]),
    "kvf_sampler_free": (None, [p]),
    "kvf_sampler_sample": (status, [p, POINTER(c_float), c_int, POINTER(c_int32)]),
    "kvf_sampler_accept": (None, [p, c_int32]),
    "kvf_build_info": (c_char_p, []),
    "kvf_simd_level": (c_char_p, []),
    "kvf_peak_rss_bytes": (c_size_t, []),
}

for _name, (_res, _args) in FUNCTIONS.items():
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args
