"""Free loopback ports, picked at run time: machines are shared, so nothing here uses a fixed port."""

import socket
import time


def free_port(host="127.0.0.1"):
    """A port that was free on `host` a moment ago. Callers that then fail to bind pick again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port, host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(port, host="127.0.0.1", timeout=30.0, alive=None):
    """Wait until something accepts connections on host:port. `alive()` returning False aborts early
    (the process that should listen has died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False
