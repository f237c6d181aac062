"""`fedcd federation certs | keygen | coordinator | node`: train local-fed across institutions.

Each institution runs ``fedcd federation node`` next to its own responses CSV; the operator
runs ``fedcd federation coordinator``, which starts Flower's SuperLink (TLS, only registered
node keys admitted), trains with student-level DP-SGD on the nodes, gates the model on
held-out students the coordinator owns, and publishes it, signed, for the Q-matrix to the
gateway's registry (the gateway serves it at once). README: "Training across institutions".
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from app.cli.common import cli, console, err
from app.settings import Settings

federation = typer.Typer(help="train local-fed across institutions whose student data never leave them "
                              "(Flower deployment engine: TLS, authenticated nodes, student-level DP)")
cli.add_typer(federation, name="federation")


def _exit_on_sigterm() -> None:
    """SIGTERM ends the command through ``finally`` blocks, so every child process is stopped too."""
    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/] {message}")
    return typer.Exit(code)


@federation.command("split")
def split(
    out: Annotated[Path, typer.Option("--out", help="folder for the coordinator's and each node's files")],
    dataset: Annotated[str, typer.Option(help="synthetic | frcsub | assist0910 | a folder")] = "frcsub",
    nodes: Annotated[int, typer.Option(min=1, help="institutions")] = 3,
    heldout: Annotated[float, typer.Option(min=0.01, max=0.9, help="share of students the coordinator keeps")] = 0.2,
    max_students: Annotated[Optional[int], typer.Option(help="subsample the dataset (seeded)")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    data_dir: Annotated[Optional[Path], typer.Option(help="folder holding the public datasets")] = None,
) -> None:
    """SIMULATED institutions, to try a federation on one machine: a public dataset split into node folders.

    Writes OUT/coordinator/{qmatrix.json,heldout.csv} and OUT/node-<i>/{responses.csv,qmatrix.json}; student
    ids get their folder's name as prefix, so no two folders share one."""
    import numpy as np

    from qmatrix.catalog import load_dataset
    from qmatrix import StudentResponses, save_qmatrix, write_responses_csv

    try:
        data = load_dataset(dataset, data_dir=data_dir, max_students=max_students, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from exc
    order = np.random.default_rng(seed).permutation(len(data.students))
    cut = max(1, round(heldout * len(order)))
    if len(order) - cut < nodes:
        raise _fail(f"{len(order)} students cannot give {nodes} nodes a student each after holding out {cut}")
    parts = {"coordinator": order[:cut], **{f"node-{i + 1}": order[cut:][i::nodes] for i in range(nodes)}}
    for name, members in parts.items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        students = [StudentResponses(student_id=f"{name}-{data.students[k].student_id}",
                                     responses=data.students[k].responses) for k in members]
        write_responses_csv(folder / ("heldout.csv" if name == "coordinator" else "responses.csv"), students)
        save_qmatrix(data.qmatrix, folder / "qmatrix.json")
        console.print(f"{folder}: {len(students)} students")
    console.print(f"SIMULATED institutions from {data.name} ({'SIMULATED' if data.simulated else 'real'} students), "
                  f"Q-matrix {data.qmatrix.id}")


@federation.command("certs")
def make_certs(
    out: Annotated[Path, typer.Option("--out", help="folder for the CA, the SuperLink certificate and node keys")],
    nodes: Annotated[str, typer.Option(help="node names, comma-separated (one key pair each)")] = "node-1,node-2,node-3",
    host: Annotated[Optional[list[str]], typer.Option("--host", help="a name or IP the SuperLink is reached at "
                                                      "(repeat; default 127.0.0.1 and localhost)")] = None,
    days: Annotated[int, typer.Option(min=1, help="certificate validity")] = 365,
) -> None:
    """A CA, the SuperLink's TLS certificate and one key pair per node (for tests and small deployments)."""
    from federated.flower import make_credentials

    try:
        creds = make_credentials(out, nodes=[n.strip() for n in nodes.split(",") if n.strip()],
                                 hosts=host or ["127.0.0.1", "localhost"])
    except (ValueError, FileExistsError) as exc:
        raise _fail(str(exc)) from exc
    console.print(f"CA certificate (give to every node): {creds.ca_cert}\nCA key (keep offline): {creds.ca_key}\n"
                  f"SuperLink certificate and key (coordinator only): {creds.superlink_cert}, {creds.superlink_key}")
    for name, (private, public) in creds.node_keys.items():
        console.print(f"node {name}: private key {private} (to that node only), public key {public} (coordinator)")


@federation.command("keygen")
def keygen(path: Annotated[Path, typer.Argument(help="where to write the private key (the public key gets .pub)")]) -> None:
    """One node's key pair, made at the node: send only the .pub file to the coordinator."""
    from federated.flower import make_node_key

    if path.exists():
        raise _fail(f"{path} exists; refusing to overwrite a key")
    private, public = make_node_key(path)
    console.print(f"private key: {private} (stays here)\npublic key: {public} (send to the coordinator)")


def _qmatrix(ref: str, qmatrix_id: str | None, tenant: str | None):  # type: ignore[no-untyped-def]
    """A Q-matrix file, or the id of one the gateway stores for ``tenant`` (or a built-in one)."""
    from app.db import Database
    from app.storage import QMatrixStore
    from qmatrix import QMatrix, example_qmatrix, load_qmatrix

    path = Path(ref)
    if path.is_file():
        q = load_qmatrix(path)
    else:
        store = QMatrixStore(Database(Settings().db_url).sessions)
        store.register_builtin(example_qmatrix())
        found = store.get(tenant or "", ref)
        if found is None:
            raise ValueError(f"--qmatrix {ref!r} is neither a file nor a Q-matrix the gateway stores "
                             f"for tenant {tenant!r} (give --tenant)")
        q = found.qmatrix
    return q if qmatrix_id is None else QMatrix(id=qmatrix_id, concepts=q.concepts, items=q.items)


@federation.command("coordinator")
def coordinator(
    qmatrix: Annotated[str, typer.Option(help="Q-matrix file (.csv/.json), or the id of one the gateway stores "
                                          "(with --tenant; built-in ones without)")],
    heldout: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="responses CSV of held-out students the "
                                          "coordinator owns (long or wide): per-round AUC and the promotion gate")],
    node_key: Annotated[list[Path], typer.Option("--node-key", exists=True, dir_okay=False,
                                                 help="a node's public key (repeat): only these nodes may connect")],
    epsilon: Annotated[float, typer.Option(help="student-level ε budget for the whole training (required)")],
    certs: Annotated[Optional[Path], typer.Option(help="folder from `fedcd federation certs` (ca.pem, superlink.pem, "
                                                  "superlink.key)")] = None,
    ca_cert: Annotated[Optional[Path], typer.Option(help="CA certificate (instead of --certs)")] = None,
    cert: Annotated[Optional[Path], typer.Option(help="SuperLink TLS certificate (instead of --certs)")] = None,
    key: Annotated[Optional[Path], typer.Option(help="SuperLink TLS private key (instead of --certs)")] = None,
    qmatrix_id: Annotated[Optional[str], typer.Option(help="publish under this Q-matrix id (default: the file's)")] = None,
    tenant: Annotated[Optional[str], typer.Option(help="with a Q-matrix id: the gateway tenant that stores it")] = None,
    host: Annotated[str, typer.Option(help="address the SuperLink listens on (0.0.0.0 for other machines)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="the SuperLink's port (nodes connect here)")] = 9092,
    rounds: Annotated[int, typer.Option(min=1, help="federated rounds (fewer if the ε budget runs out)")] = 10,
    dp: Annotated[str, typer.Option(help="student: DP-SGD at each node, the only mode nodes accept")] = "student",
    delta: Annotated[float, typer.Option(help="δ of the (ε, δ) budget")] = 1e-5,
    secagg: Annotated[bool, typer.Option("--secagg", help="secure aggregation (Flower SecAgg+)")] = False,
    aggregation: Annotated[str, typer.Option(help="fedavg | fedprox | trimmed | median")] = "fedavg",
    client_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="Poisson rate at which nodes are sampled per round")] = 1.0,
    min_nodes: Annotated[Optional[int], typer.Option(min=1, help="start with this many once --node-wait is over "
                                                     "(default: all registered)")] = None,
    node_wait: Annotated[float, typer.Option(min=1.0, help="seconds to wait for the nodes to connect")] = 300.0,
    registry: Annotated[Optional[Path], typer.Option(help="model registry (default: the gateway's)")] = None,
    work: Annotated[Optional[Path], typer.Option(help="keep the run folder and logs here (default: a temporary "
                                                 "folder, removed)")] = None,
    force: Annotated[bool, typer.Option("--force", help="publish even if the promotion gate refuses (recorded)")] = False,
    seed: Annotated[int, typer.Option(help="seed for the starting model, node sampling and seeds")] = 0,
    timeout: Annotated[float, typer.Option(min=1.0, help="give up after this many seconds")] = 3600.0,
    model: Annotated[str, typer.Option(help="higher-order-irt | irt-2pl | evidence-encoder: one kind per federation "
                                            "(comparing kinds would spend the nodes' budget once per kind)")]
    = "higher-order-irt",
    item_release_share: Annotated[Optional[float], typer.Option(
        min=0.0, max=0.99, help="the share of ε each node spends first on one noisy release of its students' per-item "
        "sums, which start the item parameters (the rest on DP-SGD, item parameters held); 0: DP-SGD over every "
        "parameter [default: federated.item_release.DEFAULT_RELEASE_SHARE, 0.9]")] = None,
) -> None:
    """Start the SuperLink (TLS, only registered nodes), train across the nodes, gate, and publish the signed model
    (the weights after the best held-out round)."""
    from federated import dp_mode
    from federated.flower import CoordinatorLink, FlowerConfig, LinkTLS, StartingModel, coordinate, plan_config
    from federated.item_release import DEFAULT_RELEASE_SHARE
    from federated.inprocess import FedConfig
    from federated.publish import publish_federated
    from qmatrix import QMatrixError, read_responses_csv

    _exit_on_sigterm()
    tls_files = [certs / "ca.pem", certs / "superlink.pem", certs / "superlink.key"] if certs else [ca_cert, cert, key]
    if any(f is None for f in tls_files):
        raise _fail("give --certs DIR, or all of --ca-cert, --cert and --key (TLS is always on)")
    missing = [str(f) for f in tls_files if f is not None and not f.is_file()]
    aggregation = {"trimmed": "trimmed_mean"}.get(aggregation, aggregation)
    if missing:
        raise _fail(f"TLS files not found: {', '.join(missing)}")
    try:
        mode = dp_mode(dp)  # federated.modes: the one reader of a DP mode's name
    except ValueError:
        mode = None
    if mode is None or not mode.noise_at_clients:
        raise _fail("--dp must be student: nodes add the noise themselves (DP-SGD) and refuse any other run")
    if not epsilon > 0:
        raise _fail("--epsilon must be > 0")
    if len({k.resolve() for k in node_key}) != len(node_key):
        raise _fail("a --node-key is given twice")
    if min_nodes is not None and min_nodes > len(node_key):
        raise _fail(f"--min-nodes {min_nodes} exceeds the {len(node_key)} registered nodes")
    try:
        q = _qmatrix(qmatrix, qmatrix_id, tenant)
        students = read_responses_csv(heldout)
        base = FlowerConfig(fed=FedConfig(client_sample_rate=client_rate), node_wait_s=node_wait,
                            item_release_share=DEFAULT_RELEASE_SHARE if item_release_share is None
                            else item_release_share)
        config = plan_config(base, rounds=rounds, dp=mode, epsilon=epsilon, delta=delta, secagg=secagg,
                             aggregation=aggregation)  # type: ignore[arg-type]
        unknown = q.unknown_items(r.item_id for s in students for r in s.responses)
        if unknown:
            raise QMatrixError([f"--heldout names items not in the Q-matrix: {', '.join(unknown[:20])}"])
    except (ValueError, OSError) as exc:
        raise _fail(str(exc)) from exc
    tls = LinkTLS(ca_cert=tls_files[0], cert=tls_files[1], key=tls_files[2])  # type: ignore[arg-type]
    folder = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="fedcd-coordinator-"))
    console.print(f"coordinator: Q-matrix {q.id} ({len(q.concepts)} concepts, {len(q.items)} items), "
                  f"{len(students)} held-out students of its own, {len(node_key)} registered nodes")

    def on_round(r: object) -> None:
        failed = f" ({r.failures} refused or failed)" if r.failures else ""  # type: ignore[attr-defined]
        console.print(f"round {r.round}: {len(r.sampled_clients)} nodes{failed}, held-out AUC {r.auc:.4f}, "  # type: ignore[attr-defined]
                      f"ε spent {r.epsilon:.3f}, {r.bytes_sent:,} bytes from nodes, {r.seconds:.1f} s",  # type: ignore[attr-defined]
                      soft_wrap=True)

    try:
        link = CoordinatorLink(tls=tls, node_keys=node_key, host=host, port=port, min_nodes=min_nodes,
                               timeout_s=timeout)
        result = coordinate(qmatrix=q, heldout=students, link=link, config=config, work_dir=folder,
                            start=StartingModel(kind=model, seed=seed), progress=on_round,
                            on_event=lambda line: console.print(line, soft_wrap=True))
        options = {"model_kind": model, "served_round": result.fed.served_round, "rounds": rounds, "dp": mode.name,
                   "epsilon_budget": epsilon, "delta": delta, "secagg": secagg,
                   "aggregation": aggregation, "client_sample_rate": client_rate, "seed": seed,
                   "noise_multiplier": config.fed.student_dp.noise_multiplier if config.fed.student_dp else None,
                   "student_sample_rate": config.fed.student_dp.sample_rate if config.fed.student_dp else None,
                   "steps_per_round": config.fed.student_dp.steps if config.fed.student_dp else None,
                   "clip_norm": config.fed.student_dp.clip_norm if config.fed.student_dp else None}
        facts = {"nodes": len(result.nodes), "node_ids": result.nodes, "registered_nodes": len(result.registered),
                 "run_id": result.run_id, "tls": True, "node_auth": tls.authenticate_nodes, "secagg": secagg,
                 "epsilon_scope": "student-level: each student's data stay at their node; ε bounds what the "
                                  "released models reveal about any one student"}
        published = publish_federated(result.fed, qmatrix=q, heldout=students,
                                      registry=registry or Settings().registry_dir, options=options,
                                      federation=facts, force=force)
    except (RuntimeError, TimeoutError, ValueError) as exc:
        raise _fail(str(exc), code=1) from exc
    finally:
        if work is None:
            shutil.rmtree(folder, ignore_errors=True)
    history = published.history
    if published.stop_reason:
        console.print(f"stopped early: {published.stop_reason}")
    decision = published.decision
    console.print(f"rounds: {len(history)}; ε spent: {history[-1].epsilon:.3f} (δ={delta:g}, student-level)"
                  if history else "no round ran")
    console.print(f"held-out AUC at the gate: {decision.candidate_auc}"
                  + (f" (active {decision.active_version}: {decision.active_auc})" if decision.active_auc is not None else ""))
    if not published.published:
        err.print(f"[red]not published:[/] {'; '.join(decision.reasons)}")
        raise typer.Exit(1)
    console.print(f"published {published.version} for Q-matrix {q.id} (signed) to {registry or Settings().registry_dir}")


@federation.command("node")
def node(
    superlink: Annotated[str, typer.Option(help="the coordinator's SuperLink, HOST:PORT")],
    root_cert: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="the federation's CA certificate")],
    auth_key: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="this node's private key")],
    data: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="this institution's responses CSV "
                                       "(long or wide); it never leaves this machine")],
    qmatrix: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="the Q-matrix file (same as the coordinator's)")],
    max_epsilon: Annotated[Optional[float], typer.Option(help="refuse runs whose student-level ε budget is larger")] = None,
    runtime_port: Annotated[Optional[int], typer.Option(help="local port of the SuperNode's runtime API (default: free)")] = None,
    max_wait: Annotated[float, typer.Option(
        min=1.0, help="seconds to keep trying to reach the SuperLink, before the first connection or once the "
                      "coordinator has finished; then exit")] = 120.0,
) -> None:
    """Join a federation: a SuperNode whose ClientApp trains on DATA with student-level DP-SGD and sends only updates.

    The node exits (code 0) once its run has ended: the coordinator stops its SuperLink after the run, and the
    node stops after --max-wait seconds without it."""
    from federated.flower import Node, NodeLink

    _exit_on_sigterm()
    link = NodeLink(superlink=superlink, root_cert=root_cert, auth_key=auth_key, runtime_port=runtime_port,
                    max_wait_s=max_wait)
    member = Node(link=link, data=data, qmatrix=qmatrix, max_epsilon=max_epsilon)
    try:
        member.start()
        summary = member.summary
        assert summary is not None
        console.print(f"node: {len(summary.students)} students, {summary.n_responses} responses on Q-matrix "
                      f"{summary.qmatrix.id} (they stay on this machine); connecting to {superlink}")
        code = member.wait(on_output=lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
        refused, unreachable, rounds = member.refused, member.unreachable, member.rounds
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    finally:
        member.close()
    if refused:
        raise _fail("the SuperLink refused this node: its public key is not registered with the coordinator", code=1)
    if unreachable and not refused:
        raise _fail(f"could not reach the SuperLink at {superlink} within {max_wait:g} s (is the coordinator "
                    "running? --max-wait waits longer)", code=1)
    if member.link_gone:
        runs = sorted({run for run, _ in rounds})
        took_part = (f"it took part in {len(rounds)} round(s) of run {', '.join(map(str, runs))}" if rounds
                     else "it was sent no work")
        console.print(f"node: the SuperLink at {superlink} has been unreachable for {max_wait:g} s: the coordinator "
                      f"has finished its run (or stopped); {took_part}. Exiting.")
        return
    if code != 0:
        raise _fail(f"the SuperNode exited with code {code}", code=1)
