#!/usr/bin/env python3
"""Trunk post-build hook: minifies wasm-bindgen's JavaScript glue (release builds) and adds a Content-Security-Policy
to the built index.html.

The policy allows only the site's own files, the wasm they instantiate ('wasm-unsafe-eval'), and the one inline
module script trunk writes to start the app, pinned by its SHA-256 hash; no other script can run, whatever a
shared link or a pasted config contains. The page connects to itself and to https://huggingface.co (a Hub model's
config.json and model info), nowhere else.

One hook does both, in this order, because trunk runs a stage's hooks concurrently and the page's hashes must be
taken after the last change to what they cover: terser rewrites the glue and the wasm takes its new import and
export names (about 8 KB gzipped less in all), then every
`integrity` attribute of the page is recomputed from the file it names, then the inline script is hashed.
Trunk's own `minify = "on_release"` has already minified the HTML and CSS (not the glue) when this runs.
"""
import base64, hashlib, json, os, re, subprocess, sys

import wasm_names

staging = os.environ.get("TRUNK_STAGING_DIR") or (sys.argv[1] if len(sys.argv) > 1 else "")
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
path = os.path.join(staging, "index.html")


def minify_glue():
    """Runs terser (installed into .tools by scripts/setup.sh) over each JS file trunk wrote; release builds only,
    so debug builds keep readable glue. The glue's wasm-bindgen names (imports, exports, `__wbg_ptr`) get short
    names, written into the module too (`scripts/wasm_names.py`): 3.5 KB gzipped off the glue, 2 KB off the wasm."""
    if os.environ.get("TRUNK_PROFILE") != "release":
        return
    terser = os.path.join(root, ".tools", "node_modules", ".bin", "terser")
    if not os.path.exists(terser):
        sys.exit(f"csp.py: {terser} is missing: run scripts/setup.sh (or setup.sh --site), which installs terser")
    for name in os.listdir(staging):
        if not name.endswith(".js"):
            continue
        js = os.path.join(staging, name)
        wasm, cache = js[:-3] + "_bg.wasm", js + ".names.json"
        glue = os.path.exists(wasm)
        # --module: the glue is an ES module (strict, top-level names are its own); its exports keep their names.
        command = [terser, js, "--module", "--compress", "--mangle", "--output", js]
        if glue:
            command += ["--mangle-props", "regex=/^(__wbg_|__wbindgen_|wasm_bindgen_)/", "--name-cache", cache]
        subprocess.run(command, check=True)
        if glue:
            names = wasm_names.from_name_cache(json.load(open(cache, encoding="utf-8")))
            os.remove(cache)
            module = open(wasm, "rb").read()
            open(wasm, "wb").write(wasm_names.rename(module, names))


def sri(match):
    """The tag with its integrity recomputed from the file its href names (same algorithm as before)."""
    tag = match.group(0)
    href = re.search(r'\shref=(?:"([^"]*)"|([^\s>]+))', tag)
    integrity = re.search(r'\sintegrity=(?:"(sha\d+)-[^"]*"|(sha\d+)-[^\s>]*)', tag)
    if not href or not integrity:
        return tag
    algorithm = integrity.group(1) or integrity.group(2)
    file = os.path.join(staging, os.path.basename(href.group(1) or href.group(2)))
    digest = base64.b64encode(hashlib.new(algorithm, open(file, "rb").read()).digest()).decode()
    start, end = integrity.span()
    return tag[:start] + f' integrity="{algorithm}-{digest}"' + tag[end:]


minify_glue()
html = open(path, encoding="utf-8").read()
html = re.sub(r"<link\s[^>]*>", sri, html)
hashes = []
for body in re.findall(r"<script(?:\s[^>]*)?>(.*?)</script>", html, flags=re.S):
    digest = base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode()
    hashes.append(f"'sha256-{digest}'")
policy = "; ".join([
    "default-src 'self'",
    "script-src 'self' 'wasm-unsafe-eval' " + " ".join(hashes),
    # No inline styles: the page sets element styles through the CSSOM only (Leptos's `style:` directives), which
    # style-src does not govern; the end-to-end tests fail on any policy violation.
    "style-src 'self'",
    "img-src 'self' data: blob:",
    # The Hub, for `model=org/name`: a config.json and the model info, both answered by huggingface.co itself
    # (small files live in the repository's git; only LFS/Xet files such as weights redirect to CDN hosts, and
    # the page never fetches those).
    "connect-src 'self' https://huggingface.co",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
])
meta = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
html = re.sub(r'<meta http-equiv="?Content-Security-Policy"?[^>]*>\s*', "", html)
# The charset tag as written in index.html or as trunk's minifier leaves it (`<meta charset=utf-8>`).
charset = re.compile(r'<meta charset="?utf-8"?\s*/?>', re.I)
if not charset.search(html):
    sys.exit("csp.py: no <meta charset> in index.html to put the Content-Security-Policy after")
html = charset.sub(lambda m: m.group(0) + meta, html, count=1)
open(path, "w", encoding="utf-8").write(html)
