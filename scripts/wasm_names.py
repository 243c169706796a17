"""Gives the wasm module's imports and exports the short names terser gave the same properties in the JS glue.

wasm-bindgen names every import and export after the Rust item and a hash (`__wbg_set_font_aa0c0c514c73a5fa`,
`wasm_bindgen_<hash>___convert__closures_____invoke___...`): some 280 names, each written once in the glue and
once in the module. `scripts/csp.py` has terser rename those properties in the glue (`--mangle-props` with a
name cache); `rename` then writes the same names into the module's import and export sections, so the two still
meet. The binary format is read just far enough to find those names (sections 2 and 7 of the core spec); every
other byte is copied as it is. A name that would collide, or a module that is not wasm, stops the build.
"""


def _leb(data, i):
    """The unsigned LEB128 at `i`, and the index after it."""
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _enc_leb(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _name(data, i):
    size, i = _leb(data, i)
    return data[i:i + size].decode("utf-8"), i + size


def _enc_name(text):
    raw = text.encode("utf-8")
    return _enc_leb(len(raw)) + raw


def _limits_end(data, i):
    flags = data[i]
    _, i = _leb(data, i + 1)
    if flags & 1:
        _, i = _leb(data, i)
    return i


def _import_desc_end(data, i):
    """The index after one import's description: a function, table, memory, global or tag."""
    kind = data[i]
    i += 1
    if kind == 0:
        return _leb(data, i)[1]
    if kind == 1:
        return _limits_end(data, i + 1)
    if kind == 2:
        return _limits_end(data, i)
    if kind == 3:
        return i + 2
    if kind == 4:
        return _leb(data, i + 1)[1]
    raise SystemExit(f"wasm_names.py: import kind {kind} is not one the core spec defines")


def _imports(body, names):
    count, i = _leb(body, 0)
    out, seen = [_enc_leb(count)], set()
    for _ in range(count):
        module, i = _name(body, i)
        field, i = _name(body, i)
        end = _import_desc_end(body, i)
        field = names.get(field, field)
        if (module, field) in seen:
            raise SystemExit(f"wasm_names.py: two imports would be called {module}.{field}")
        seen.add((module, field))
        out += [_enc_name(module), _enc_name(field), body[i:end]]
        i = end
    return b"".join(out)


def _exports(body, names):
    count, i = _leb(body, 0)
    out, seen = [_enc_leb(count)], set()
    for _ in range(count):
        name, i = _name(body, i)
        end = _leb(body, i + 1)[1]
        name = names.get(name, name)
        if name in seen:
            raise SystemExit(f"wasm_names.py: two exports would be called {name}")
        seen.add(name)
        out += [_enc_name(name), body[i:end]]
        i = end
    return b"".join(out)


def rename(wasm, names):
    """`wasm` with each import field and export named in `names` renamed to its value."""
    if wasm[:8] != b"\0asm\x01\0\0\0":
        raise SystemExit("wasm_names.py: not a version-1 wasm module")
    out, i = [wasm[:8]], 8
    while i < len(wasm):
        section = wasm[i]
        size, start = _leb(wasm, i + 1)
        body = wasm[start:start + size]
        i = start + size
        if section == 2:
            body = _imports(body, names)
        elif section == 7:
            body = _exports(body, names)
        out += [bytes([section]), _enc_leb(len(body)), body]
    return b"".join(out)


def from_name_cache(cache):
    """The property renames in terser's `--name-cache` JSON (`{"props": {"props": {"$old": "new"}}}`)."""
    props = cache.get("props", {}).get("props", {})
    return {old[1:]: new for old, new in props.items() if old.startswith("$")}
