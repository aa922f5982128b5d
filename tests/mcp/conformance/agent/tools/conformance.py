"""The MCP conformance suite's fixture tools (its server scenarios call them by name).

Each function is registered as a registry tool (python:conformance.py:NAME) and served
on /mcp like any other: every call a durable run. Images, audio and embedded resources
are returned as MCP content blocks under the `$content` key; progress and log lines
come from partial results (a generator's yields before its last). The sampling and
elicitation tools ask the client of the call through `ctx` (the subprocess protocol's
`ask`).
"""

import json
import time

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
WAV = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA"


def test_simple_text():
    """Returns simple text content."""
    return "This is a simple text response for testing."


def test_image_content():
    """Returns image content."""
    return {"$content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]}


def test_audio_content():
    """Returns audio content."""
    return {"$content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}


def test_embedded_resource():
    """Returns an embedded resource."""
    return {
        "$content": [
            {
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                },
            }
        ]
    }


def test_multiple_content_types():
    """Returns text, image and resource content."""
    return {
        "$content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": '{"test":"data","value":123}',
                },
            },
        ]
    }


def test_tool_with_logging():
    """Logs while it runs: each step is a partial result, forwarded as a log message."""
    yield "Tool execution started"
    time.sleep(0.05)
    yield "Tool processing data"
    time.sleep(0.05)
    yield "Tool execution completed"


def test_tool_with_progress():
    """Reports progress 0, 50 and 100 of 100."""
    for step in (0, 50, 100):
        yield {"progress": step, "total": 100}
        time.sleep(0.05)
    yield "Progress test completed"


def test_error_handling():
    """Always fails."""
    raise RuntimeError("This tool intentionally returns an error for testing")


def json_schema_2020_12_tool(name=None, address=None):
    """Tool with JSON Schema 2020-12 features."""
    return {"name": name, "address": address}


def test_sampling(prompt: str, ctx):
    """Asks the client's model to complete the prompt."""
    answer = ctx.sample(prompt, max_tokens=100)
    content = answer.get("content")
    text = content.get("text") if isinstance(content, dict) else json.dumps(content)
    return "LLM response: %s" % text


def test_elicitation(message: str, ctx):
    """Asks the person at the client for a username and an email."""
    answer = ctx.elicit(
        message,
        {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        },
    )
    return "User response: action=%s, content=%s" % (answer.get("action"), json.dumps(answer.get("content")))


def _completed(answer):
    return "Elicitation completed: action=%s, content=%s" % (answer.get("action"), json.dumps(answer.get("content")))


def test_elicitation_sep1034_defaults(ctx):
    """Elicits a form whose fields of every primitive type have defaults (SEP-1034)."""
    answer = ctx.elicit(
        "Please review your details",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": True},
            },
        },
    )
    return _completed(answer)


def test_elicitation_sep1330_enums(ctx):
    """Elicits a form with each of the five enum shapes (SEP-1330)."""
    answer = ctx.elicit(
        "Please choose",
        {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {
                    "type": "string",
                    "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"},
                    ],
                },
                "legacyEnum": {
                    "type": "string",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"},
                        ]
                    },
                },
            },
        },
    )
    return _completed(answer)


def test_reconnection():
    """Takes a second: long enough for a server started with a short
    --mcp-sse-close-after to close the call's SSE stream before the answer (SEP-1699)."""
    time.sleep(1.0)
    return "Reconnection test completed"
