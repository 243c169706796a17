#!/usr/bin/env python3
"""Trunk post-build hook: adds a Content-Security-Policy to the built index.html.

The policy allows only the site's own files, the wasm they instantiate ('wasm-unsafe-eval'), and the one inline
module script trunk writes to start the app, pinned by its SHA-256 hash; no other script can run, whatever a
shared link or a pasted config contains.
"""
import base64, hashlib, os, re, sys

staging = os.environ.get("TRUNK_STAGING_DIR") or (sys.argv[1] if len(sys.argv) > 1 else "")
path = os.path.join(staging, "index.html")
html = open(path, encoding="utf-8").read()
hashes = []
for body in re.findall(r"<script(?: [^>]*)?>(.*?)</script>", html, flags=re.S):
    digest = base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode()
    hashes.append(f"'sha256-{digest}'")
policy = "; ".join([
    "default-src 'self'",
    "script-src 'self' 'wasm-unsafe-eval' " + " ".join(hashes),
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
])
meta = f'<meta http-equiv="Content-Security-Policy" content="{policy}" />'
html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>\s*', "", html)
html = html.replace('<meta charset="utf-8" />', '<meta charset="utf-8" />\n  ' + meta, 1)
open(path, "w", encoding="utf-8").write(html)
