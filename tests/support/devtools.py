"""Drive headless Chromium from a test: the DevTools protocol over --remote-debugging-pipe.

Chromium reads JSON commands, each ended by a NUL byte, on its file descriptor 3 and writes
answers and events the same way on descriptor 4. Only what the page tests need is here: open a
page, evaluate JavaScript, type text, click and point with the mouse, and keep the events.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

TIMEOUT_S = 60  # an answer or a condition that takes longer than this fails the test


class DevToolsError(RuntimeError):
    """Chromium answered a command with an error, or did not answer in time."""


class Browser:
    """One headless Chromium process and one page in it."""

    def __init__(self, binary: str, flags: list[str], profile: Path):
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def as_fds_3_and_4() -> None:  # runs in the child before exec
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_read, answers_write)]
            os.dup2(high[0], 3)  # copies above 10 first, so neither pipe end is overwritten on the way
            os.dup2(high[1], 4)

        self.process = subprocess.Popen(
            [binary, *flags, "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=as_fds_3_and_4,
        )
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def close(self) -> None:
        """End the browser process."""
        with contextlib.suppress(DevToolsError, OSError):
            self.send("Browser.close", session=False)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._answers)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        """The next NUL-terminated JSON message from Chromium."""
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self._answers], [], [], max(remaining, 0))
            if not ready:
                raise DevToolsError("Chromium did not answer in time")
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise DevToolsError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        """Run one protocol command (on the page's session unless `session` is False); its result."""
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session and self.session is not None:
            command["sessionId"] = self.session
        os.write(self._commands, json.dumps(command).encode("utf-8") + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise DevToolsError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def open(self, url: str) -> None:
        """Open `url` in a new page, attach to it (recording its events) and wait until it has loaded."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Runtime.enable")
        self.send("Network.enable")
        self.send("Page.enable")
        self.send("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page; a thrown exception fails."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise DevToolsError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str) -> Any:
        """Evaluate `expression` until it is truthy; its value."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise DevToolsError(f"waited in vain for {expression}")

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element `selector`."""
        x, y = self.centre(selector)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def hover(self, selector: str) -> None:
        """Move the mouse onto the middle of the element `selector`."""
        x, y = self.centre(selector)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def centre(self, selector: str) -> tuple[float, float]:
        """Viewport coordinates of the middle of an element, scrolled into view."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView(); "
            "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        return box[0], box[1]

    def type_text(self, selector: str, text: str) -> None:
        """Focus an input, select what it holds, and type `text` over it as keyboard input."""
        self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
            "e.focus(); e.select(); })()"
        )
        self.send("Input.insertText", text=text)

    def press_enter(self) -> None:
        """Press and release the Enter key in the focused element."""
        for kind in ("keyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13
            )

    def choose(self, selector: str, value: str) -> None:
        """Pick an option of a <select> as a user would (its change event fires)."""
        self.evaluate(
            f"(() => {{ const s = document.querySelector({json.dumps(selector)}); "
            f"s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})()"
        )

    def requested_urls(self) -> list[str]:
        """Every URL the page has requested so far."""
        sent = [e for e in self.events if e.get("method") == "Network.requestWillBeSent"]
        return [e["params"]["request"]["url"] for e in sent]

    def errors(self) -> list[str]:
        """Script exceptions and console errors so far."""
        found = []
        for event in self.events:
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(json.dumps(event["params"]["exceptionDetails"])[:500])
            if event.get("method") == "Runtime.consoleAPICalled" and event["params"]["type"] == "error":
                found.append(json.dumps(event["params"]["args"])[:500])
        return found
