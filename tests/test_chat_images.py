"""``/image PATH`` in ``xrmq chat``: the image file goes with the next question through a
running edge box (router, tools destination) to the provider, an OpenAI-compatible
server on loopback that records the request: the user message is a text block and an
``image_url`` block holding the file as a data URL."""

from __future__ import annotations

import base64
import io

import pytest

from xrmq.actors.edge.chat import chat

from chat_terminal import provider_box_config
from openai_server import OpenAIServer, Reply

PNG_1x1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.mark.timeout(180)
async def test_an_image_attached_in_chat_reaches_the_provider_as_an_image_url_block(
    monkeypatch, tmp_path
):
    from xrmq.actors.edge.private_stack import PrivateStack

    monkeypatch.setenv("XRMQ_TEST_KEY", "sk-test")
    picture = tmp_path / "bench.png"
    picture.write_bytes(PNG_1x1)
    url = "data:image/png;base64," + base64.b64encode(PNG_1x1).decode()
    with OpenAIServer(Reply(chunks=("A red multimeter.",))) as server:
        async with PrivateStack(
            provider_box_config(server.api_base, "looking", "Looks at pictures of the bench.")
        ) as stack:
            out = io.StringIO()
            lines = f"/image {picture}\nWhat is on the bench?\n/image {tmp_path}/nope.txt\n/quit\n"
            code = await chat(stack.bus, "p1", timeout=60, out=out, stdin=io.StringIO(lines))
            assert not stack.failed
    printed = out.getvalue()
    assert code == 0
    assert f"xrmq chat: {picture} will be shown with the next question (1 image(s))" in printed
    assert "looking: A red multimeter." in printed
    assert f"xrmq chat: /image: cannot read '{tmp_path}/nope.txt' as an image: " in printed
    asked = [
        message
        for request in server.requests
        for message in request.body.get("messages", [])
        if message["role"] == "user" and isinstance(message["content"], list)
    ]
    assert asked == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is on the bench?"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]
