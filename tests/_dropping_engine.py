"""An engine at the HTTP edge that drops connections: the weight-sync half of SGLang's control API
(/health, /model_info, /pause_generation, /continue_generation, /update_weights_from_disk) over a
real socket, and `--drop ROUTE:N`: the first N requests for ROUTE in this process's life get their
connection reset once the request line is read (what the lookup seed-0 run's restarted engine did
to a /pause_generation), so the client sees httpx.ReadError. GET /tries says how many requests
each route received, dropped ones included.

    python tests/_dropping_engine.py --port P [--drop /update_weights_from_disk:1]

Stdlib only, so a restart takes well under a second. Used by tests/test_reload_retry.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct


class Engine:
    def __init__(self, drops: dict[str, int]):
        self.drops = drops
        self.tries: dict[str, int] = {}
        self.version = "0"

    def answer(self, method: str, route: str, body: dict) -> dict:
        if route == "/update_weights_from_disk":
            self.version = body["weight_version"]
            return {"success": True, "message": "ok", "num_paused_requests": 0}
        if route == "/model_info":
            return {"weight_version": self.version}
        if route == "/tries":
            return {"tries": self.tries, "pid": os.getpid(), "weight_version": self.version}
        return {}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: one request after another on this connection
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            lines = head.decode().split("\r\n")
            method, route = lines[0].split()[:2]
            self.tries[route] = self.tries.get(route, 0) + 1
            if self.drops.get(route, 0) > 0:
                self.drops[route] -= 1
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
                writer.transport.abort()
                return
            size = next((int(x.split(":", 1)[1]) for x in lines if x.lower().startswith("content-length:")), 0)
            body = json.loads(await reader.readexactly(size)) if size else {}
            payload = json.dumps(self.answer(method, route, body)).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
        writer.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--drop", action="append", default=[], help="ROUTE:N")
    a = ap.parse_args()
    engine = Engine({route: int(n) for route, n in (d.rsplit(":", 1) for d in a.drop)})
    server = await asyncio.start_server(engine.serve, "127.0.0.1", a.port, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
