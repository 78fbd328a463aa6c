"""A whole run against a local OpenAI-compatible server: `--base-url` through langchain-openai, real HTTP on
loopback."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest

from ksearch.agent.config import RunConfig
from ksearch.flows import run as runner
from tests.helpers.http import serving
from tests.helpers.scripts import WRONG_KERNEL, fenced, init_plan, row_kernel

pytestmark = pytest.mark.slow


@pytest.fixture
def scripted_server():
    replies = [
        "Sure, here is the plan:\n```json\n" + init_plan([("a", 0.9)]) + "\n```",
        fenced(WRONG_KERNEL.format(sleep=0.0, variant=1)),
        fenced(row_kernel(2)),
    ]
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            reply = replies[len(seen) - 1] if len(seen) <= len(replies) else "no more"
            payload = {
                "id": f"chatcmpl-{len(seen)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": 100 + len(seen), "completion_tokens": 10, "total_tokens": 110 + len(seen)},
            }
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    with serving(Handler) as port:
        yield f"http://127.0.0.1:{port}/v1", seen


@pytest.mark.usefixtures("fake_executor")
def test_run_through_local_openai_compatible_server(tmp_path, scripted_server):
    base_url, seen = scripted_server
    cfg = RunConfig(
        run_id="http-run",
        task="softmax",
        model="openai:local-test-model",
        base_url=base_url,
        device="cpu",
        max_rounds=2,
        stagnation_window=2,
        budget={"price_input_per_mtok": 1.0, "price_output_per_mtok": 2.0},
    )
    outcome = runner.start_run(cfg, workspace=tmp_path / "ws")

    assert outcome.status == "finished" and outcome.rounds_used == 2
    assert outcome.best is not None and outcome.best.node_id == "a"
    assert len(seen) == 3
    assert all(r["path"] == "/v1/chat/completions" for r in seen)
    assert all(r["body"]["model"] == "local-test-model" for r in seen)
    assert "WORLD MODEL" in seen[0]["body"]["messages"][-1]["content"]
    assert "# Feedback" in seen[2]["body"]["messages"][-1]["content"]
    debug_prompt = seen[2]["body"]["messages"][-1]["content"]
    assert (
        "Verdict of your last attempt: incorrect" in debug_prompt and "Mismatch on" in debug_prompt
    )  # the failure goes back to the coder

    store = runner.open_store(tmp_path / "ws")
    try:
        calls = store.list_llm_calls("http-run")
        assert [c["role"] for c in calls] == ["planner", "coder", "coder"]
        assert [c["input_tokens"] for c in calls] == [101, 102, 103]
        assert all(c["output_tokens"] == 10 for c in calls)
        assert calls[0]["cost_usd"] == pytest.approx((101 * 1.0 + 10 * 2.0) / 1e6)
        usage = store.usage("http-run")
        assert usage["coder"]["calls"] == 2 and usage["planner"]["calls"] == 1
    finally:
        store.close()
