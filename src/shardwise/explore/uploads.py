"""Files loaded with the page's buttons (a model, a calibration): kept by the server in its own
folder under a name it makes (the SHA-256 of the kind, the suffix and the bytes). The browser holds
only that digest and the file's name for display: no path ever comes from the browser, and a
digest the server was not given is refused."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import shutil
import threading
from pathlib import Path
from typing import Any

from shardwise.explore.checks import ControlError

KINDS = ("model", "calibration")
SUFFIXES = (".json", ".yaml", ".yml")
MAX_UPLOAD_BYTES = 1 << 20  # a config.json or a calibration is a few kB (hf_config reads at most 1 MiB)
MAX_KEPT = 32  # files kept at once; the oldest is forgotten first
MAX_NAME = 255
DIGEST = re.compile(r"[0-9a-f]{64}")


class Uploads:
    """The uploaded files under `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._kept: dict[str, Path] = {}  # digest -> file, oldest first
        self._books = threading.Lock()  # bookkeeping only

    def save(self, kind: str, filename: Any, contents: Any) -> tuple[dict[str, str] | None, str]:
        """(what the browser keeps, the line shown beside the button) for an upload (a data URL)."""
        name = filename if isinstance(filename, str) else ""
        suffix = Path(name).suffix.lower()
        if kind not in KINDS or suffix not in SUFFIXES:
            return None, f" {name[:60]}: give a .json (Hugging Face config) or .yaml file"
        try:
            data = base64.b64decode(str(contents).split(",", 1)[1], validate=True)
        except (IndexError, ValueError, binascii.Error):
            return None, f" {name[:60]}: the browser sent no readable file"
        if len(data) > MAX_UPLOAD_BYTES:
            return None, f" {name[:60]}: {len(data):,} bytes is more than the explorer takes ({MAX_UPLOAD_BYTES:,})"
        digest = hashlib.sha256(f"{kind}{suffix}".encode() + b"\0" + data).hexdigest()
        path = self.folder / digest / f"{kind}-upload{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        with self._books:
            self._kept.pop(digest, None)
            self._kept[digest] = path
            forgotten = [self._kept.pop(old) for old in list(self._kept)[:-MAX_KEPT]]
        for old in forgotten:
            shutil.rmtree(old.parent, ignore_errors=True)
        return {"name": name[:MAX_NAME], "digest": digest}, f" {name[:60]} "

    def path(self, kind: str, kept: Any) -> str | None:
        """The file a page's command reads for what the browser keeps (None: no file loaded)."""
        if kept is None:
            return None
        digest = kept.get("digest") if isinstance(kept, dict) else None
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ControlError(
                f"{kind}-file", f"the loaded {kind} file is not one this explorer was given: load it again"
            )
        with self._books:
            path = self._kept.get(digest)
        if path is None or not path.name.startswith(kind) or not path.exists():
            raise ControlError(
                f"{kind}-file", f"the loaded {kind} file is no longer kept by the explorer: load it again"
            )
        return str(path)

    def shown(self, command: str, names: dict[str, Any] | None = None) -> str:
        """A command as the user would type it: each file loaded named as the user's own file
        (`names`: kind -> what the browser keeps, with the file's name), else as the explorer
        names it (`--model model-upload.json`), never by its place in the explorer's folder."""
        import shlex

        for kind, kept in (names or {}).items():
            name = kept.get("name") if isinstance(kept, dict) else None
            if isinstance(name, str) and name.strip() and isinstance(kept.get("digest"), str):
                for suffix in SUFFIXES:
                    own = f"{self.folder}/{kept['digest']}/{kind}-upload{suffix}"
                    command = command.replace(own, shlex.quote(Path(name).name))
        return re.sub(re.escape(f"{self.folder}/") + r"[0-9a-f]{64}/", "", command)
