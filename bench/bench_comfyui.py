"""Time to video in a real ComfyUI: a prompt queued over its HTTP API, timed until the MP4 is written.

``bench_time_to_video`` runs the pipeline in processes of its own and calls its ComfyUI rows an
emulation: the same nodes' work, without ComfyUI's executor, its caching of node outputs, its
conversions at the node edges and its housekeeping between prompts (a full garbage collection
and ``torch.cuda.empty_cache()`` after a prompt when the last one is over 10 s old). This script
starts ComfyUI itself (``main.py`` of ``--comfyui``, headless, on 127.0.0.1) with the pack in
its ``custom_nodes`` and queues the all-in-one example workflow (``--workflow stages``: the one
with a node per stage) as a client would:

* ``first_ever``: a new server with empty Inductor, Triton and pack caches, its first prompt
  (the server then stays up as a user's ComfyUI does, until its log says the compile started
  after the prompt is done, or ``--linger-after-first`` seconds at most: later launches find what
  it compiled in the caches; a launch stopped before shows ``compile_logged: false`` and a warning,
  and its relaunches compile again);
* ``new_process``: a relaunched server with the caches the first one left, its first prompt
  (what a user waits for after each ComfyUI launch);
* ``warm_process``: a second prompt in that server, with different speech and the same portrait
  (Load Image and Load Ditto Models come from ComfyUI's cache), queued ``--idle-before-warm``
  seconds after the first one finished, as a user presses Queue again (ComfyUI's housekeeping
  after the first prompt is over by then);
* ``warm_queued``: a third, the second's speech with another seed (so only the nodes from the
  motion on run again), queued the moment the second finished, as a client with a queue of jobs does;
* ``warm_process_2``, ``warm_queued_2``, ...: with ``--warm-rounds`` above 1, more such pairs, each
  round with the other speech (whether a slow second prompt is the first after the idle wait or
  the first after the process's compile).

Wall time runs from the ``POST /prompt`` to the ``execution_success`` message on the prompt's
WebSocket (the MP4 is in place by then: it is checked), and is split by those messages into the
wait before execution, each node, and the rest. Each state also reports the server's launch to
ready time, the pack's import time as ComfyUI logged it, the nodes' own timing records, and the
CPU time the server and the processes under it spent during the prompt; each pack's log is
searched for known warnings (:data:`LOG_PATTERNS`).
Several ``--pack NAME=DIR`` run side by side, relaunched in turn (so drift weighs on each alike).

    python3 -m bench.bench_comfyui --comfyui $COMFYUI --models $MODELS --hubert $HUBERT --out $OUT/comfyui.json
    python3 -m bench.bench_comfyui --comfyui $COMFYUI --device cpu --stub-hubert --max-seconds 0.24 --repeats 1
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ditto_core.signals import exit_status, terminate_as_interrupt

from .bench_time_to_video import REPO, add_input_arguments, cache_env, ensure_models, goal_verdict, speech_variants

GOALS = {"warm_process.wall_s": ("<=", 1.5), "warm_queued.wall_s": ("<=", 1.5), "new_process.wall_s": ("<=", 5.0),
         "first_ever.wall_s": ("<=", 30.0)}
WORKFLOWS = {"all_in_one": REPO / "example_workflows" / "api" / "ditto_all_in_one.json",
             "stages": REPO / "example_workflows" / "api" / "ditto_portrait_to_mp4.json"}
"""What ``--workflow`` queues: the all-in-one node, or the stage nodes (each stage's share then
shows as its node's)."""
PORTRAIT_NAME = "ditto_portrait.jpg"
COMPILED_LINE = "Ditto warp+decode compiled in"  # logged by the engine when its compile is done

LOG_PATTERNS = {"captured_allocation_freed": "uncaptured free of a captured allocation",
                "prompt_failed": "!!! Exception during processing"}
"""Lines counted in each pack's server log (every launch's): PyTorch's warning when memory
allocated while a CUDA graph was being recorded is freed outside it (under cudaMallocAsync, any
thread's allocation during another thread's recording counts as the graph's), and ComfyUI's
report of a failed node."""


# ----------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def without_ditto_checkouts(pythonpath: str) -> str:
    """``pythonpath`` less the folders that hold a ``ditto_core`` package. A pack appends its own
    folder to ``sys.path``, so such an entry would shadow it: every pack of a run would import
    that one checkout's library (session 35's first "serial" pack ran main's)."""
    return os.pathsep.join(entry for entry in pythonpath.split(os.pathsep)
                           if entry and not (Path(entry) / "ditto_core").is_dir())


@dataclass
class Server:
    """One ComfyUI process on 127.0.0.1 (headless: an empty front-end root, no browser)."""

    base: Path
    cache_root: Path
    log_path: Path
    device: str
    comfyui: Path
    python: str
    port: int = field(default_factory=_free_port)
    stall_log: Optional[Path] = None  # with --trace-stalls: where stall_trace writes
    process: Optional[subprocess.Popen] = None
    spawned: float = 0.0
    ready_s: Optional[float] = None
    log_start: int = 0  # the log's size when this launch started (the file holds every launch's)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float) -> None:
        front_end = self.base / "no_front_end"
        front_end.mkdir(exist_ok=True)
        command = [self.python, "main.py", "--listen", "127.0.0.1", "--port", str(self.port), "--base-directory",
                   str(self.base), "--disable-auto-launch", "--front-end-root", str(front_end)]
        if self.device == "cpu":
            command.append("--cpu")
        env = {**os.environ, **cache_env(self.cache_root), "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": without_ditto_checkouts(os.environ.get("PYTHONPATH", ""))}
        if self.stall_log is not None:
            env["DITTO_STALL_TRACE"] = str(self.stall_log)
        self.spawned = time.time()
        self.log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(command, cwd=self.comfyui, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = self.spawned + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ComfyUI exited during start-up (code {self.process.returncode}); see {self.log_path}")
            info = _get(f"{self.url}/object_info/DittoTalkingHead")
            if info is not None:  # ComfyUI listens once every custom node package is imported (or failed to)
                if "DittoTalkingHead" not in info:
                    raise RuntimeError(f"ComfyUI started without the pack's nodes (its import failed); see {self.log_path}")
                self.ready_s = time.time() - self.spawned
                return
            time.sleep(0.1)
        raise RuntimeError(f"ComfyUI did not answer within {timeout} s; see {self.log_path}")

    def logged(self, text: str) -> bool:
        """Whether this launch's part of the log holds ``text``."""
        with open(self.log_path, "rb") as log:
            log.seek(self.log_start)
            return text.encode() in log.read()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def pack_import_s(self) -> Optional[float]:
        """The pack's import time from ComfyUI's "Import times for custom nodes" lines (the last launch's)."""
        found = re.findall(r"^\s*([0-9.]+) seconds.*ComfyUI-Ditto\s*$", self.log_path.read_text(errors="replace"), re.M)
        return float(found[-1]) if found else None


def process_tree_cpu(root: int) -> dict[int, tuple[float, int]]:
    """CPU seconds (user + system) and thread count of ``root`` and every process under it, by
    pid, from Linux's ``/proc`` (empty elsewhere, or when ``root`` is gone)."""
    stats: dict[int, tuple[int, float, int]] = {}  # pid -> (parent, cpu s, threads)
    try:
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        stats[pid] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, int(fields[17]))
    if root not in stats:
        return {}
    tree, grew = {root}, True
    while grew:
        below = {pid for pid, (parent, _, _) in stats.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    return {pid: stats[pid][1:] for pid in tree}


def cpu_during(before: dict[int, tuple[float, int]], after: dict[int, tuple[float, int]], root: int) -> dict[str, Any]:
    """What the server and the processes under it spent between two :func:`process_tree_cpu`
    readings: a prompt whose wall time grew beside busy children (a compile's workers, say)
    shows it here. A child that ended in between is not counted."""
    if root not in before or root not in after:
        return {}
    children = [pid for pid in after if pid != root]
    return {"server_s": round(after[root][0] - before[root][0], 2), "server_threads": after[root][1],
            "children": len(children),
            "children_s": round(sum(after[pid][0] - before.get(pid, (0.0, 0))[0] for pid in children), 2)}


def _get(url: str) -> Optional[dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read() or b"{}")
    except (OSError, urllib.error.URLError, ValueError):
        return None


# ----------------------------------------------------------------------------- one prompt


async def _queue_and_wait(url: str, prompt: dict, timeout: float) -> dict[str, Any]:
    """POST the prompt with the WebSocket of its client already open; every message's arrival time."""
    import aiohttp

    client_id = uuid.uuid4().hex
    events: list[tuple[float, str, dict]] = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"{url}/ws?clientId={client_id}") as ws:
            start = time.time()
            async with session.post(f"{url}/prompt", json={"prompt": prompt, "client_id": client_id}) as response:
                reply = await response.json()
            if response.status != 200 or reply.get("node_errors"):
                return {"error": f"prompt refused ({response.status}): {json.dumps(reply)[:2000]}"}
            prompt_id = reply["prompt_id"]
            deadline = start + timeout
            while True:
                message = await ws.receive(timeout=max(0.1, deadline - time.time()))
                if message.type != aiohttp.WSMsgType.TEXT:
                    if message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        return {"error": "the server closed the WebSocket"}
                    continue  # previews
                payload = json.loads(message.data)
                data = payload.get("data") or {}
                if data.get("prompt_id") not in (None, prompt_id):
                    continue
                events.append((time.time() - start, payload["type"], data))
                if payload["type"] in ("execution_success", "execution_error", "execution_interrupted"):
                    break
        history = await _history(session, url, prompt_id)
    return {"events": events, "history": history, "requested_at": start}


async def _history(session: Any, url: str, prompt_id: str, timeout: float = 10.0) -> dict:
    """The prompt's history entry. ComfyUI sends ``execution_success`` from its executor and
    stores the history only after the executor returns, so a client asking at once may find none
    yet (session 28: a prompt whose MP4 was written read as "no MP4 in the prompt's outputs")."""
    deadline = time.time() + timeout
    while True:
        async with session.get(f"{url}/history/{prompt_id}") as response:
            history = (await response.json()).get(prompt_id)
        if history is not None or time.time() > deadline:
            return history or {}
        await asyncio.sleep(0.05)


def timeline(events: list[tuple[float, str, dict]], classes: dict[str, str]) -> dict[str, Any]:
    """Request-relative times -> wall time, the wait before the first node, each node's seconds
    (from its ``executing`` message to the next one's), the cached nodes, and how it ended."""
    ended, kind, data = events[-1]
    result: dict[str, Any] = {"wall_s": ended, "ended": kind}
    if kind != "execution_success":
        result["error"] = data.get("exception_message") or kind
    started = [(t, d["node"]) for t, k, d in events if k == "executing" and d.get("node") is not None]
    result["before_first_node_s"] = started[0][0] if started else ended
    nodes = {}
    for (t, node), (t_next, _) in zip(started, [*started[1:], (ended, None)]):
        nodes[f"{node}:{classes.get(node, '?')}"] = round(t_next - t, 4)
    result["nodes_s"] = nodes
    result["executed_s"] = {f"{d['node']}:{classes.get(d['node'], '?')}": round(t, 4)
                            for t, k, d in events if k == "executed" and d.get("node") is not None}
    result["cached"] = sorted(f"{n}:{classes.get(n, '?')}" for _, k, d in events if k == "execution_cached"
                              for n in d.get("nodes", []))
    return result


def node_edges(state: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Where a node's span (its ``executing`` message to the next) went beyond its own timer:
    ``before_timer_s`` (the message to the timed block's start: ComfyUI's and the node's set-up),
    ``timer_to_executed_s`` (the block's end to the node's ``executed`` message) and
    ``executed_to_next_s`` (that message to the next node's, or to the prompt's end)."""
    edges, begun = {}, state["before_first_node_s"]
    for node, span in state["nodes_s"].items():  # in the order they ran
        record, executed = state.get("node_records", {}).get(node, {}), state.get("executed_s", {}).get(node)
        if "started_at" in record and executed is not None and "requested_at" in state:
            started = record["started_at"] - state["requested_at"]
            edges[node] = {"before_timer_s": round(started - begun, 4),
                           "timer_to_executed_s": round(executed - started - record["seconds"], 4),
                           "executed_to_next_s": round(begun + span - executed, 4)}
        begun += span
    return edges


WAITING = ("threading.py", "queue.py", "selectors.py", "base_events.py", "stall_trace.py")
"""Where a thread's innermost frame lies while it waits (its own ``sleep`` or ``wait`` call)."""


def prompt_stalls(path: Path, start: float, end: float, top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` longest stalls :mod:`bench.stall_trace` wrote between ``start`` and ``end``
    (epoch seconds): when each began (seconds after ``start``), how long, and the threads that
    were not waiting then (their innermost frames)."""
    stalls = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            stall = json.loads(line)
        except json.JSONDecodeError:  # the last line of a server stopped while writing
            continue
        began = stall["at"] - stall["late_s"]
        if start <= stall["at"] and began <= end:
            busy = {name: frames[-3:] for name, frames in stall["threads"].items()
                    if frames and frames[-1].split(":")[0] not in WAITING}
            stalls.append({"t_s": round(began - start, 3), "late_s": stall["late_s"], "busy": busy})
    return sorted(stalls, key=lambda stall: -stall["late_s"])[:top]


def _saved_mp4(history: dict, base: Path) -> Optional[Path]:
    for output in history.get("outputs", {}).values():
        for entry in output.get("images", []):
            if entry["filename"].endswith(".mp4"):
                return base / entry["type"] / entry["subfolder"] / entry["filename"]
    return None


def run_prompt(server: Server, prompt: dict, timeout: float) -> dict[str, Any]:
    """One prompt, timed; the MP4 it names is checked to be there, whole."""
    from .bench_common import count_frames

    import aiohttp

    pid = server.process.pid if server.process is not None else -1
    before = process_tree_cpu(pid)
    try:
        got = asyncio.run(_queue_and_wait(server.url, prompt, timeout))
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:  # the next launch may still run
        return {"error": f"{type(error).__name__}: {error}"}
    if "error" in got:
        return got
    classes = {k: v["class_type"] for k, v in prompt.items()}
    result = timeline(got["events"], classes)
    result["requested_at"] = got["requested_at"]
    result["cpu"] = cpu_during(before, process_tree_cpu(pid), pid)
    result["node_records"] = {f"{node}:{classes.get(node, '?')}": output["ditto_stats"][0]  # the nodes' own timers
                              for node, output in got["history"].get("outputs", {}).items() if output.get("ditto_stats")}
    result["node_edges"] = node_edges(result)
    if server.stall_log is not None:
        result["stalls"] = prompt_stalls(server.stall_log, got["requested_at"], got["requested_at"] + result["wall_s"])
    mp4 = _saved_mp4(got["history"], server.base)
    if "error" not in result:
        if mp4 is None or not mp4.is_file():
            result["error"] = f"no MP4 in the prompt's outputs ({mp4})"
        else:
            result["mp4_frames"] = count_frames(mp4)
    return result


def workflow(name: str, speech: str, device: str, preset: str, crf: int, steps: int, seed: int = 0) -> dict:
    """An example workflow as a client queues it, with the benchmark's settings wherever a node
    has that input; no face detection (random weights detect none)."""
    prompt = json.loads(WORKFLOWS[name].read_text())
    settings = {"detect_face": False, "preset": preset, "crf": crf, "steps": steps, "seed": seed,
                "filename_prefix": "bench/ttv"}
    for node in prompt.values():
        inputs = node["inputs"]
        if node["class_type"] == "DittoLoadModels":
            inputs["device"] = device if device == "cpu" else "auto"
        elif node["class_type"] == "LoadImage":
            inputs["image"] = PORTRAIT_NAME
        elif node["class_type"] == "LoadAudio":
            inputs["audio"] = speech
        inputs.update({key: value for key, value in settings.items() if key in inputs})
    return prompt


# ----------------------------------------------------------------------------- the states


def prepare_base(base: Path, pack: Path, models: Path, image: Path, speeches: tuple[Path, Path],
                 trace_stalls: bool = False) -> None:
    """A ComfyUI base folder: the pack in custom_nodes (with ``trace_stalls``, beside it
    :mod:`bench.stall_trace` as a package of its own), the models in models/ditto, the inputs."""
    (base / "custom_nodes").mkdir(parents=True)
    (base / "custom_nodes" / "ComfyUI-Ditto").symlink_to(pack.resolve(), target_is_directory=True)
    if trace_stalls:
        (base / "custom_nodes" / "ditto_stall_trace").mkdir()
        shutil.copyfile(Path(__file__).with_name("stall_trace.py"), base / "custom_nodes" / "ditto_stall_trace" / "__init__.py")
    (base / "models").mkdir()
    (base / "models" / "ditto").symlink_to(models.resolve(), target_is_directory=True)
    (base / "user").mkdir()  # ComfyUI's database and the pack's avatar cache
    (base / "input").mkdir()
    shutil.copyfile(image, base / "input" / PORTRAIT_NAME)
    for speech in speeches:
        shutil.copyfile(speech, base / "input" / speech.name)


def launch_and_queue(args: argparse.Namespace, base: Path, cache_root: Path, prompts: list[dict],
                     idle_before: list[float], linger: float = 0.0) -> dict[str, Any]:
    """Launch a server, queue ``prompts`` one after another (each after its idle wait), keep it
    up until the pack logs its compile (``linger`` seconds at most), stop it."""
    server = Server(base, cache_root, base / "comfyui.log", args.device, args.comfyui, args.comfyui_python,
                    stall_log=base / "stalls.jsonl" if args.trace_stalls else None)
    result: dict[str, Any] = {"launch": {}, "prompts": []}
    try:
        server.start(args.startup_timeout)
        result["launch"] = {"ready_s": server.ready_s, "pack_import_s": server.pack_import_s()}
        for prompt, idle in zip(prompts, idle_before):
            time.sleep(idle)
            result["prompts"].append(run_prompt(server, prompt, args.prompt_timeout))
            result["prompts"][-1]["done_since_spawn_s"] = time.time() - server.spawned
        if linger > 0:
            result["launch"]["linger"] = linger_for_compile(server, linger)
    except RuntimeError as error:
        result["launch"]["error"] = str(error)
    finally:
        server.stop()
    result["launch"]["builds_waited_s"] = round(wait_for_builders(cache_root, args.builder_timeout), 2)
    return result


def linger_for_compile(server: Server, longest: float) -> dict[str, Any]:
    """Keep the server up until its log says the engine's compile is done, ``longest`` seconds
    at most (a pack that compiles nothing, as on the CPU, lingers that long)."""
    start = time.time()
    while not (logged := server.logged(COMPILED_LINE)) and time.time() - start < longest:
        time.sleep(0.5)
    return {"seconds": round(time.time() - start, 1), "compile_logged": logged}


def wait_for_builders(cache_root: Path, timeout: float) -> float:
    """Seconds spent waiting for the detached builds a run started (AOT packages, built after
    a render in a process of their own), so that the next launch finds what they make, as a
    user relaunching minutes later would."""
    from ditto_core.render.aot_build import builds_under_way

    # The pack's own cache only (its AOT packages live there): Inductor's and Triton's caches,
    # thousands of files after a compile, sit beside it under cache_root and hold no attempt.
    pack_cache = Path(cache_env(cache_root)["XDG_CACHE_HOME"])
    start = time.time()
    while builds_under_way(pack_cache) and time.time() - start < timeout:
        time.sleep(0.5)
    return time.time() - start


def later_prompts(rounds: int) -> list[str]:
    """The states of each relaunch's prompts, in order (see the module docstring): the first
    prompt, then per round one after the idle wait and one queued at once (``_2``, ``_3`` from
    the second round on)."""
    names = ["new_process"]
    for round_ in range(1, rounds + 1):
        suffix = "" if round_ == 1 else f"_{round_}"
        names += [f"warm_process{suffix}", f"warm_queued{suffix}"]
    return names


def summarise(first: dict, later: list[dict], rounds: int = 1) -> dict[str, Any]:
    """The first-ever launch's prompt; of the relaunches, the one with the median first prompt
    (its later prompts are the warm ones), every relaunch's times beside it (the JSON's
    ``launches`` keeps every launch's prompts whole)."""
    def state(run: dict, index: int) -> dict[str, Any]:
        if len(run["prompts"]) <= index:
            return {"error": run["launch"].get("error", "no prompt ran"), "launch": run["launch"]}
        return {**run["prompts"][index], **({"launch": run["launch"]} if index == 0 else {})}

    def first_wall(run: dict) -> float:
        return run["prompts"][0].get("wall_s", float("inf")) if run["prompts"] else float("inf")

    done = sorted(later, key=first_wall)
    median = done[(len(done) - 1) // 2] if done else first
    states = {"first_ever": state(first, 0)}
    for index, name in enumerate(later_prompts(rounds)):
        states[name] = state(median, index)
        states[name]["all_wall_s"] = [run["prompts"][index].get("wall_s") for run in later if len(run["prompts"]) > index]
    return states


def _print_table(result: dict[str, Any]) -> None:
    print(f"{'pack':<10} {'state':<13} {'wall s':>7}  breakdown")
    for pack, states in result["packs"].items():
        for name, state in states.items():
            if "error" in state:
                print(f"{pack:<10} {name:<13} {'error':>7}  {state['error']}")
                continue
            parts = [f"ready {state['launch']['ready_s']:.2f}"] if "launch" in state else []
            parts.append(f"wait {state['before_first_node_s']:.2f}")
            parts += [f"{node.split(':')[1]} {seconds:.2f}" for node, seconds in state["nodes_s"].items()]
            if state["cached"]:
                parts.append("cached " + " ".join(node.split(":")[1] for node in state["cached"]))
            for record in state.get("node_records", {}).values():  # batches so far in this process
                if "engine" in record:
                    engine = record["engine"]
                    parts.append(f"engine {engine['warmup']}: graph {engine['graph_batches']} eager {engine['eager_batches']}")
                    if engine.get("compiled_at") and "requested_at" in state:  # < 0: compiled during this prompt
                        parts.append(f"compiled {state['requested_at'] - engine['compiled_at']:.1f} s before the request")
                if record.get("stages"):
                    parts.append(" ".join(f"{name} {seconds:.2f}" for name, seconds in record["stages"].items()))
                if "reserved_gib_at_start" in record:
                    parts.append(f"reserved {record['reserved_gib_at_start']:.2f} GiB at the start")
            for node, edges in state.get("node_edges", {}).items():
                parts.append(f"{node.split(':')[1]} span: " + " ".join(f"{k} {v:.2f}" for k, v in edges.items()))
            if state.get("cpu"):
                cpu = state["cpu"]
                parts.append(f"cpu server {cpu['server_s']:.2f} s ({cpu['server_threads']} threads), children "
                             f"{cpu['children']} ({cpu['children_s']:.2f} s)")
            for stall in state.get("stalls", [])[:3]:
                busy = "; ".join(f"{thread}: {frames[-1]}" for thread, frames in stall["busy"].items())
                parts.append(f"stall {stall['late_s']:.2f} s at {stall['t_s']:.2f} [{busy}]")
            if state.get("all_wall_s"):
                parts.append("every launch " + " ".join(f"{v:.2f}" for v in state["all_wall_s"]))
            print(f"{pack:<10} {name:<13} {state['wall_s']:7.2f}  {', '.join(parts)}")
    for pack, counts in result.get("log_counts", {}).items():
        print(f"log {pack}: " + ", ".join(f"{name} {count}" for name, count in counts.items()))
    for pack, states in result["packs"].items():
        for key, (op, goal, got, verdict) in goal_verdicts(states).items():
            print(f"goal {pack}: {key} {op} {goal}: {got if got is None else round(got, 2)} ({verdict})")


def log_counts(text: str) -> dict[str, int]:
    """How many lines of a server log hold each of :data:`LOG_PATTERNS`."""
    lines = text.splitlines()
    return {name: sum(pattern in line for line in lines) for name, pattern in LOG_PATTERNS.items()}


def goal_verdicts(states: dict[str, Any]) -> dict[str, tuple[str, float, Optional[float], str]]:
    """Each goal's (op, goal, measured, verdict) for one pack's states. A prompt that failed
    counts as "failed" whatever its time: an error can come fast."""
    verdicts = {}
    for key, (op, goal) in GOALS.items():
        name, metric = key.split(".")
        state = states.get(name, {})
        got = state.get(metric)
        verdicts[key] = (op, goal, got, goal_verdict(got, goal, "error" in state))
    return verdicts


def _pack(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep or not name or not Path(folder).is_dir():
        raise argparse.ArgumentTypeError(f"--pack wants NAME=FOLDER with FOLDER a checkout of the pack, got {text!r}")
    return name, Path(folder)


def main(argv: Optional[list[str]] = None) -> None:
    from .scene import PORTRAIT_CANDIDATES, SPEECH_CANDIDATES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", type=Path, default=os.environ.get("COMFYUI_DIR"),
                        help="a ComfyUI checkout (default: $COMFYUI_DIR)")
    parser.add_argument("--comfyui-python", default=os.environ.get("COMFYUI_PYTHON", sys.executable),
                        help="the Python of ComfyUI's environment (default: $COMFYUI_PYTHON, else this one)")
    parser.add_argument("--pack", type=_pack, action="append", default=None,
                        help="NAME=FOLDER: a checkout of the pack to measure (repeatable; default: this one as 'main')")
    add_input_arguments(parser, PORTRAIT_CANDIDATES, SPEECH_CANDIDATES)
    parser.add_argument("--workflow", choices=sorted(WORKFLOWS), default="all_in_one",
                        help="all_in_one (Ditto Talking Head) or stages (one node a stage: each stage's share shows)")
    parser.add_argument("--max-seconds", type=float, default=None, help="trim the speech (CPU smoke runs)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--preset", default="ultrafast")
    parser.add_argument("--crf", type=int, default=18)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3, help="relaunches per pack (the median one is reported)")
    parser.add_argument("--idle-before-warm", type=float, default=2.0,
                        help="seconds between the first prompt's end and the second's request (ComfyUI collects "
                             "garbage right after a prompt; a queue of prompts would wait for that)")
    parser.add_argument("--warm-rounds", type=int, default=1,
                        help="rounds of (a prompt after --idle-before-warm, one queued at once) per relaunch, each "
                             "with the other speech than the round before (the goals are the first round's)")
    parser.add_argument("--linger-after-first", type=float, default=0.0,
                        help="the longest the first-ever server stays up after its prompt, as a user's ComfyUI does, "
                             "waiting for the compile started after the prompt to be logged (and cached)")
    parser.add_argument("--builder-timeout", type=float, default=300,
                        help="the longest wait, after a server stops, for the builds it started in the background")
    parser.add_argument("--startup-timeout", type=float, default=300)
    parser.add_argument("--prompt-timeout", type=float, default=600)
    parser.add_argument("--trace-stalls", action="store_true",
                        help="note in each prompt the longest stalls of the server's threads and what ran then (bench/stall_trace.py)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.comfyui is None or not (args.comfyui / "main.py").is_file():
        parser.error("--comfyui (or $COMFYUI_DIR) must name a ComfyUI checkout (a folder with main.py)")
    for flag in ("idle_before_warm", "linger_after_first"):  # checked before a server runs, not after its prompt
        if getattr(args, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be 0 or more seconds, got {getattr(args, flag)}")
    if args.warm_rounds < 1:
        parser.error(f"--warm-rounds must be 1 or more, got {args.warm_rounds}")
    args.models.mkdir(parents=True, exist_ok=True)
    ensure_models(args)
    packs = dict(args.pack or [("main", REPO)])
    result: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}, "packs": {}}
    # A time limit's SIGTERM unwinds like Ctrl-C: each server is stopped, the folder removed.
    with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="bench_comfyui_") as tmp:
        work = Path(tmp)
        seconds = args.max_seconds
        if seconds is None:
            import av

            with av.open(str(args.audio)) as container:
                seconds = float(container.duration / 1e6)
        speeches = speech_variants(args.audio, seconds, work)
        def prompt(speech: Path, seed: int = 0) -> dict:
            return workflow(args.workflow, speech.name, args.device, args.preset, args.crf, args.steps, seed)

        # Round r speaks the other speech than round r - 1 (round 1: than the first prompt), so its
        # first prompt reloads the audio as a user's next job does; its queued prompt keeps it.
        prompts, idles = [prompt(speeches[0])], [0.0]
        for round_ in range(args.warm_rounds):
            speech = speeches[1 - round_ % 2]
            prompts += [prompt(speech, seed=2 * round_), prompt(speech, seed=2 * round_ + 1)]
            idles += [args.idle_before_warm, 0.0]
        bases = {name: work / f"base_{name}" for name in packs}
        firsts, later = {}, {name: [] for name in packs}
        for name, folder in packs.items():
            prepare_base(bases[name], folder, args.models, args.image, speeches, args.trace_stalls)
            firsts[name] = launch_and_queue(args, bases[name], bases[name] / "caches", prompts[:1], [0.0],
                                            args.linger_after_first)
            linger = firsts[name]["launch"].get("linger")
            if linger is not None and args.device != "cpu" and not linger["compile_logged"]:
                print(f"warning: {name}: no compile logged within --linger-after-first {args.linger_after_first:g} s; "
                      "its relaunches start from a cold cache and compile again (raise the flag)", flush=True)
        for _ in range(args.repeats):
            for name in packs:
                later[name].append(launch_and_queue(args, bases[name], bases[name] / "caches", prompts, idles))
                result["packs"][name] = summarise(firsts[name], later[name], args.warm_rounds)
                result.setdefault("launches", {})[name] = [firsts[name], *later[name]]  # every prompt's records
                if args.out:  # after every launch: a run stopped by its time limit keeps what it measured
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        logs = {name: (bases[name] / "comfyui.log").read_text(errors="replace") for name in packs}
        result["log_tails"] = {name: text[-3000:] for name, text in logs.items()}
        result["log_counts"] = {name: log_counts(text) for name, text in logs.items()}
    result["goals"] = {k: {"op": op, "value": v} for k, (op, v) in GOALS.items()}
    result["verdicts"] = {pack: {k: v[3] for k, v in goal_verdicts(states).items()} for pack, states in result["packs"].items()}
    _print_table(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as stop:  # Ctrl-C or a time limit's SIGTERM, after the servers were stopped
        print(f"stopped: {stop or 'interrupted'}; what was measured is in --out", file=sys.stderr)
        sys.exit(exit_status(stop))
