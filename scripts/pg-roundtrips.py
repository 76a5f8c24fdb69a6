#!/usr/bin/env python3
"""Counts the round trips clients make to PostgreSQL: a loopback TCP proxy that forwards
everything and reads the client's side of the wire protocol. A round trip is a message the
client then waits on: a simple Query ('Q'), or a Parse ('P', the driver's prepare) or an
Execute ('E') of the extended protocol (each followed by its Sync). A Close sent when a
prepared statement is dropped is not waited on and not counted. Startup and TLS requests count
as connections.

Usage: pg-roundtrips.py LISTEN_PORT PG_PORT COUNTS_FILE
Writes {"connections": n, "query": n, "parse": n, "execute": n} to COUNTS_FILE every second
and on SIGTERM. Only for benchmarks on loopback; plain TCP only (no sslmode past disable).
"""
import asyncio
import json
import signal
import struct
import sys

counts = {"connections": 0, "query": 0, "parse": 0, "execute": 0}
KINDS = {ord("Q"): "query", ord("P"): "parse", ord("E"): "execute"}


async def client_to_server(reader, writer):
    buf = bytearray()
    started = False
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)
        buf += data
        while True:
            if not started:
                if len(buf) < 8:
                    break
                (length,) = struct.unpack("!I", buf[:4])
                if len(buf) < length:
                    break
                (code,) = struct.unpack("!I", buf[4:8])
                del buf[:length]
                # SSLRequest / GSSENCRequest: the server answers one byte, then a real startup.
                if code not in (80877103, 80877104):
                    started = True
                continue
            if len(buf) < 5:
                break
            (length,) = struct.unpack("!I", buf[1:5])
            if len(buf) < 1 + length:
                break
            kind = KINDS.get(buf[0])
            if kind:
                counts[kind] += 1
            del buf[: 1 + length]
        await writer.drain()
    writer.close()


async def server_to_client(reader, writer):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    writer.close()


async def handle(client_reader, client_writer, pg_port):
    counts["connections"] += 1
    try:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", pg_port)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(
        client_to_server(client_reader, server_writer),
        server_to_client(server_reader, client_writer),
        return_exceptions=True,
    )


def dump(path):
    with open(path + ".tmp", "w") as f:
        json.dump(counts, f)
    import os

    os.replace(path + ".tmp", path)


async def main():
    listen_port, pg_port, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, pg_port), "127.0.0.1", listen_port
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        while not stop.is_set():
            dump(path)
            try:
                await asyncio.wait_for(stop.wait(), 1)
            except asyncio.TimeoutError:
                pass
    dump(path)


asyncio.run(main())
