# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The cluster's Nodes as one LIST and then a watch keep them, for the executor's passes (an informer of one kind, as
client-go's): a pass reads them with no call, instead of a LIST of every Node per pass.

- NodeStore: what the watch's events and the executor's own writes make of the Nodes (pure; no I/O).
- NodeCache: the LIST, and the watch from its version in a thread of its own, that feed a NodeStore.

Reads see the executor's own writes at once (write-through): a write's result goes into the store, and the watch's
events for that Node that are older than the write are skipped until the watch brings the write. Others' changes
arrive as the watch brings them, within milliseconds; a read then is as fresh as a LIST made a moment before.
A watch that ends in 410 Gone (its version compacted), breaks, or is refused lists again."""

from __future__ import annotations

import collections
import threading
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube

NODES_PATH = "/api/v1/nodes"


def _meta(obj):
    return (obj or {}).get("metadata") or {}


class NodeStore:
    """The Nodes by name, with the version to watch from. Not thread-safe by itself: NodeCache holds its lock."""

    HISTORY = 4096   # (uid, resourceVersion) pairs applied lately: a write the watch already brought is not pending

    def __init__(self, nodes=(), version=None):
        self.nodes = {_meta(n).get("name"): n for n in nodes}
        # name -> (the held Node, its copy that reads hand out): a Node is copied once per object the store holds (an
        # event or a write replaces the object whole, never changes it), not once per read.
        self.copies = {}
        self.version = version
        self.pending = {}       # name -> resourceVersion of an own write the watch has not brought yet
        self.deleted = set()    # uids deleted by us whose DELETED event has not come yet
        self.applied = collections.deque(maxlen=self.HISTORY)
        self.seen = set()

    def _remember(self, uid, version):
        if len(self.applied) == self.applied.maxlen:
            self.seen.discard(self.applied[0])
        self.applied.append((uid, version))
        self.seen.add((uid, version))

    def apply(self, event):
        """Fold one watch event in. Returns False for an ERROR event (for example 410 Gone): the store is then no
        longer current (version None) and must be listed again."""
        kind, obj = event.get("type"), event.get("object") or {}
        meta = _meta(obj)
        if kind == "ERROR":
            self.version = None
            return False
        if meta.get("resourceVersion"):
            self.version = meta["resourceVersion"]
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return True   # BOOKMARK: only the version moves
        name, uid, version = meta.get("name"), meta.get("uid"), meta.get("resourceVersion")
        self._remember(uid, version)
        if kind == "DELETED":
            self.nodes.pop(name, None)
            self.pending.pop(name, None)
            self.deleted.discard(uid)
            return True
        if uid in self.deleted:
            return True   # older than our deletion of it
        if name in self.pending:
            if self.pending[name] != version:
                return True   # older than our write, whose result the store holds
            del self.pending[name]
        self.nodes[name] = obj
        return True

    def write_through(self, node):
        """The result of our own write of a Node: read at once, and the watch's older events for it skipped."""
        meta = _meta(node)
        if (meta.get("uid"), meta.get("resourceVersion")) in self.seen or meta.get("uid") in self.deleted:
            return   # the watch brought it already (and maybe something newer)
        self.nodes[meta["name"]] = node
        self.pending[meta["name"]] = meta.get("resourceVersion")

    def mark_deleted(self, node):
        """Our own deletion of a Node: gone at once, and the watch's older events for it skipped."""
        meta = _meta(node)
        held = self.nodes.get(meta.get("name"))
        if held is not None and _meta(held).get("uid") == meta.get("uid"):
            del self.nodes[meta["name"]]
            self.pending.pop(meta["name"], None)
            self.deleted.add(meta.get("uid"))

    def snapshot(self):
        """Copies of every Node, in name order. A Node's copy is made when the store first hands out the object it
        holds for it, and handed out again by every read until an event or a write replaces that object: so a read
        costs a copy only of the Nodes that changed since the last one. The store never changes a copy, nor an object
        it copied (it replaces them whole), so a copy a read gave keeps what it held whatever the watch brings later;
        those who read must not change it either (the executor and the planner do not: test_executor_shared_nodes.py)."""
        copies, taken = {}, []
        for name in sorted(self.nodes):
            held = self.nodes[name]
            kept = self.copies.get(name)
            if kept is None or kept[0] is not held:
                kept = (held, json_copy(held))
            copies[name] = kept
            taken.append(kept[1])
        self.copies = copies   # the Nodes gone since drop out
        return taken


def json_copy(value):
    """A deep copy of a JSON document (dicts, lists and immutable scalars, as the API's answers and the watch's events
    are): what copy.deepcopy makes of it at about a third of its cost, which every pass paid for every Node."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value


class NodeCache:
    """A NodeStore fed by a LIST and a watch in a thread of its own. `listen(event)` is called with each event as it
    is applied, and with {"type": "RELISTED"} after the thread listed again (changes may have been missed); when it
    answers True, wait() ends. It runs under `lock` (reentrant: a caller may hold it around read() to take its own
    view of the snapshot). The thread ends once nothing read or waited for IDLE_SECONDS (a run that ended); the next
    read lists again."""

    WATCH_SECONDS = 30      # one watch request; the next starts from the last version
    IDLE_SECONDS = 120
    RETRY_SECONDS = 1.0

    def __init__(self, client, listen=None, clock=time.monotonic):
        self.client, self.listen, self.clock = client, listen, clock
        self.lock = threading.Condition()
        self.store = None
        self.thread = None
        self.used = clock()
        self.changed = False
        self.waiters = 0
        self.lists = 0          # full LISTs made, for the benchmark's count of calls

    # -- reads and own writes (the executor's thread) ----------------------------------------------------------
    def read(self):
        """Every Node (copies, shared by the reads until the Node changes: NodeStore.snapshot): from the store while the
        watch keeps it, else after a LIST (which starts the watch). Returns (nodes, version)."""
        with self.lock:
            self.used = self.clock()
            if self.store is None or self.store.version is None or not self._watching():
                self._list_locked()
            self.changed = False
            return self.store.snapshot(), self.store.version

    def write_through(self, node):
        with self.lock:
            if self.store is not None:
                self.store.write_through(node)

    def mark_deleted(self, node):
        with self.lock:
            if self.store is not None:
                self.store.mark_deleted(node)

    def wait(self, seconds):
        """Until listen() said an event changes the plan (True) or `seconds` passed (False)."""
        with self.lock:
            if not self._watching():
                return None
            self.waiters += 1
            try:
                return self.lock.wait_for(lambda: self.changed, timeout=seconds)
            finally:
                self.waiters -= 1
                self.used = self.clock()

    def wake(self):
        """End wait() as a change would (under the lock)."""
        self.changed = True
        self.lock.notify_all()

    # -- the watch (its own thread) ------------------------------------------------------------------------------
    def _watching(self):
        return self.thread is not None and self.thread.is_alive()

    def _list_locked(self):
        nodes, version = kube.list_versioned(self.client, NODES_PATH)
        self.lists += 1
        self.store = NodeStore(nodes, version)
        if not self._watching():
            self.thread = threading.Thread(target=self._run, name="kubenodes-node-watch", daemon=True)
            self.thread.start()

    def _run(self):
        while True:
            with self.lock:
                if not self.waiters and self.clock() - self.used > self.IDLE_SECONDS:
                    self.thread = None
                    return
                version = self.store.version if self.store is not None else None
            try:
                if version is None:
                    self._relist()
                    continue
                # The server ends a quiet stream after WATCH_SECONDS; the client's read timeout is only for one
                # that stopped answering.
                for event in kube.watch(self.client, NODES_PATH, version, self.WATCH_SECONDS,
                                        read_timeout=self.WATCH_SECONDS + 10):
                    if not self._apply(event):
                        break
            except Exception as exc:  # pylint: disable=broad-except
                # Refused, the server away, a stream cut: list again, after a pause unless the version was only too
                # old (410 Gone). A read meanwhile lists at once.
                with self.lock:
                    if self.store is not None:
                        self.store.version = None
                if getattr(exc, "status", None) != 410:
                    time.sleep(self.RETRY_SECONDS)

    def _apply(self, event):
        with self.lock:
            current = self.store.apply(event)
            self._tell(event)
            return current

    def _relist(self):
        nodes, version = kube.list_versioned(self.client, NODES_PATH)
        with self.lock:
            self.lists += 1
            self.store = NodeStore(nodes, version)
            self._tell({"type": "RELISTED"})

    def _tell(self, event):
        if self.listen is not None and self.listen(event):
            self.wake()
