"""How the cloud emulators tell the node simulator that an instance booted or went away.

An emulator holds an InstanceHooks object. When an instance it created is "running" it calls
created(); when an instance is deleted it calls deleted(). The node simulator then registers the
Node after its join delay (or never, per its knobs), or marks it NotReady and stops its etcd member.
NoHooks lets an emulator run alone (emulator and provider tests); HttpHooks talks to the node
simulator's control API (POST /instances, DELETE /instances?provider_id=...).
"""

import json
import urllib.parse
import urllib.request


class NoHooks:
    def created(self, provider_id, node_name, group_id, image, role, zone=None):
        """An instance now runs. role is "control-plane" or "worker"."""

    def deleted(self, provider_id):
        """An instance is gone."""


class HttpHooks(NoHooks):
    def __init__(self, url, timeout=10):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        # The simulator is on loopback over plain HTTP; no proxy may intercept it.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=self.timeout) as resp:
            payload = resp.read()
        return json.loads(payload) if payload else None

    def created(self, provider_id, node_name, group_id, image, role, zone=None):
        return self._call("POST", "/instances", dict(provider_id=provider_id, node_name=node_name, group_id=group_id,
                                                     image=image, role=role, zone=zone))

    def deleted(self, provider_id):
        return self._call("DELETE", "/instances?" + urllib.parse.urlencode({"provider_id": provider_id}))


def from_url(url):
    return HttpHooks(url) if url else NoHooks()
