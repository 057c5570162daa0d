"""A GGUF file copied with keys set or removed and tensors added, through the
gguf package's reader and writer: how the tests plant what a converter may
write (RoPE scaling keys, rope_freqs.weight, keys and tensors kvfold does not
implement) into the fixtures."""
import gguf
import numpy as np

# Python values to GGUF scalar types, as the tests give them.
TYPES = {bool: gguf.GGUFValueType.BOOL, int: gguf.GGUFValueType.UINT32, float: gguf.GGUFValueType.FLOAT32,
         str: gguf.GGUFValueType.STRING}


def gguf_copy(src, dst, set_kv=None, drop=(), tensors=None):
    """Writes dst: src's keys (those in set_kv replaced or added: {key: value}, drop left out) and tensors, then
    the extra tensors ({name: float32 array})."""
    set_kv = dict(set_kv or {})
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture" or field.name in drop:
            continue
        if field.name in set_kv:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for key, value in set_kv.items():
        w.add_key_value(key, value, TYPES[type(value)])
    extra = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in (tensors or {}).items()}
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    for name, v in extra.items():
        w.add_tensor_info(name, v.shape, v.dtype, v.nbytes, gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    for v in extra.values():
        w.write_tensor_data(v)
    w.close()
    return arch
