"""On-disk cache of LLM responses, keyed by a content hash, so a resumed run does not pay twice.

    cache = ResponseCache(os.path.join(workdir, "judge_cache"))
    key = content_key({"model": m, "messages": msgs, "tools": tools})
    hit = cache.get(key)          # None if absent or unreadable
    cache.put(key, response)      # atomic: temp file in the same folder + os.replace

A corrupt or foreign file is treated as a miss (and overwritten by the next put), never an error; a
cache that cannot be written (read-only disk) is logged once and otherwise ignored. `root` may be a
gs:// folder (etils.epath; object writes are atomic there).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from typing import Any

log = logging.getLogger(__name__)


def content_key(payload: Any) -> str:
    """sha256 of the canonical JSON of `payload`."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:

    def __init__(self, root: str):
        self.root = str(root)
        self.remote = "://" in self.root
        self._warned = False

    def path(self, key: str) -> str:
        if self.remote:
            return f"{self.root.rstrip('/')}/{key[:2]}/{key}.json"
        return os.path.join(self.root, key[:2], f"{key}.json")

    def get(self, key: str) -> dict | None:
        try:
            if self.remote:
                from etils import epath
                record = json.loads(epath.Path(self.path(key)).read_text())
            else:
                with open(self.path(key), encoding="utf-8") as f:
                    record = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, UnicodeDecodeError) as e:
            log.warning("ignoring unreadable judge cache entry %s: %s", key, e)
            return None
        if not isinstance(record, dict) or record.get("key") != key or not isinstance(record.get("value"), dict):
            log.warning("ignoring malformed judge cache entry %s", key)
            return None
        return record["value"]

    def put(self, key: str, value: dict) -> None:
        path = self.path(key)
        if self.remote:
            try:
                from etils import epath
                epath.Path(path).write_text(json.dumps({"key": key, "value": value}, ensure_ascii=False))
            except (OSError, TypeError, ValueError) as e:
                if not self._warned:
                    log.warning("judge cache not written (%s): %s", path, e)
                    self._warned = True
            return
        tmp = None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"key": key, "value": value}, f, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            tmp = None
        except (OSError, TypeError, ValueError) as e:
            if not self._warned:
                log.warning("judge cache not written (%s): %s", path, e)
                self._warned = True
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
