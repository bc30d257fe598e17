"""Raw stdin: broken input gets a JSON-RPC error and the server keeps serving."""

from __future__ import annotations

import json
import queue
import subprocess
import threading

from conftest import BIN, clean_env

READ_SECONDS = 20


def test_garbage_on_stdin_gets_json_rpc_errors_and_the_next_request_works(server, home, agent_id):
    child = subprocess.Popen(
        [BIN, "mcp", "--server", server.base, "--token", server.agent_token(agent_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(home),
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()

    def send(message: object) -> None:
        assert child.stdin is not None
        child.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        child.stdin.flush()

    def receive() -> dict:
        return json.loads(lines.get(timeout=READ_SECONDS))

    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        initialized = receive()
        assert initialized["id"] == 1 and initialized["result"]["serverInfo"]["name"] == "agent-inbox"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})

        send("this is {not json")
        parse_error = receive()
        assert parse_error["id"] is None and parse_error["error"]["code"] == -32700, parse_error

        send({"hello": "world"})
        invalid = receive()
        assert invalid["id"] is None and invalid["error"]["code"] == -32600, invalid

        send({"jsonrpc": "2.0", "id": 7, "params": {}})
        no_method = receive()
        assert no_method["id"] == 7 and no_method["error"]["code"] == -32600, no_method

        send({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"})
        unknown = receive()
        assert unknown["id"] == 2 and unknown["error"]["code"] == -32601, unknown

        # A known method whose params do not fit is Invalid params, not Method not found.
        for id, method, params in [
            (21, "tools/call", {"arguments": {}}),
            (22, "tasks/get", {"taskId": 5}),
            (23, "resources/read", {}),
            (24, "tasks/cancel", {}),
        ]:
            send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            malformed = receive()
            assert malformed["id"] == id and malformed["error"]["code"] == -32602, malformed

        send({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        listed = receive()
        assert listed["id"] == 3, listed
        assert "inbox_claim" in {tool["name"] for tool in listed["result"]["tools"]}

        send({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "inbox_poll", "arguments": {}}})
        polled = receive()
        assert polled["id"] == 4 and polled["result"]["isError"] is False, polled
    finally:
        assert child.stdin is not None
        child.stdin.close()
        try:
            code = child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            raise
    assert code == 0, "end of stdin ends the server cleanly"
