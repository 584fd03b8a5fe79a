"""A widget in a real IPython kernel, driven over the comm protocol as JupyterLab drives it.

``LiveWidget(code)`` starts a kernel, runs ``code`` (which must display a widget named ``w``) and
finds the widget's comm; ``send`` delivers the message a moved slider sends, ``run`` executes code
and returns its stdout, ``python_updates`` the state updates Python sends back to the page.
"""

from __future__ import annotations

import json

from jupyter_client.manager import start_new_kernel

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class LiveWidget:
    def __init__(self, code: str):
        self.code = code

    def __enter__(self):
        self.km, self.kc = start_new_kernel(kernel_name="python3")
        try:
            msgs = self._execute(self.code + "\nseen = []\n"
                                 "w.observe(lambda c: seen.append(c['name']), names=list(w.keys))\ndisplay(w)")
            opens = [m for m in msgs if m["msg_type"] == "comm_open"
                     and m["content"]["data"]["state"].get("_model_name") == "AnyModel"]
            assert len(opens) == 1, f"expected one anywidget comm, got {len(opens)}"
            self.comm_id = opens[0]["content"]["comm_id"]
            shown = [m["content"]["data"] for m in msgs if m["msg_type"] == "display_data"]
            assert shown and shown[0][WIDGET_VIEW]["model_id"] == self.comm_id
            assert "text/html" in shown[0]  # the static fallback travels with the view
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def _execute(self, code: str, timeout: float = 60) -> list[dict]:
        msg_id, out = self.kc.execute(code), []
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            out.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        errors = [m["content"] for m in out if m["msg_type"] == "error"]
        assert not errors, errors
        return out

    def run(self, code: str) -> str:
        """stdout of ``code``."""
        return "".join(m["content"]["text"] for m in self._execute(code) if m["msg_type"] == "stream")

    def send(self, state: dict) -> list[str]:
        """Front end -> Python: the update a moved control sends; returns the trait names Python saw change."""
        self.run("seen.clear()")
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", {
            "comm_id": self.comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}}))
        return json.loads(self.run("import time, json\n"
                                   f"for _ in range(100):\n    if len(set(seen)) >= {len(state)}: break\n"
                                   "    time.sleep(0.05)\n"
                                   "print(json.dumps(sorted(set(seen))))"))

    def python_updates(self, code: str) -> list[dict]:
        """Python -> front end: the state updates sent to the page while ``code`` runs."""
        return [m["content"]["data"]["state"] for m in self._execute(code) if m["msg_type"] == "comm_msg"
                and m["content"]["comm_id"] == self.comm_id and m["content"]["data"].get("method") == "update"]
