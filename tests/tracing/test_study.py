"""`specscope study` end to end on tiny random checkpoints: files, fidelity columns, resume."""

from __future__ import annotations

import csv
import re
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from specscope.errors import SpecscopeError  # noqa: E402
from specscope.cli import main  # noqa: E402

pytestmark = pytest.mark.slow  # the end-to-end study


def test_study_writes_report_and_fidelity_and_resumes(target_and_draft, tmp_path, capsys):
    target, draft = target_and_draft
    workload = tmp_path / "echo.jsonl"
    prompts = [[5, 6, 7, 8, 5, 6, 7, 8, 5], [9, 10, 11, 9, 10, 11, 9], [3, 4, 3, 4, 3, 4], [20, 21, 22, 23]]
    workload.write_text("".join(json.dumps({"id": i, "prompt_token_ids": p}) + "\n" for i, p in enumerate(prompts)))
    out = tmp_path / "study"
    argv = ["study", "--model", str(target), "--draft", str(draft), "--workload", str(workload),
            "--batch-sizes", "1,2", "--max-tokens", "12", "--k-max", "4", "--threads", "1", "-o", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "fidelity" in first and "report" in first
    rows = list(csv.DictReader((out / "fidelity.csv").open()))
    assert {"method", "batch_size", "measured_speedup", "simulated_speedup", "error_pct", "tree",
            "tree_nodes"} <= set(rows[0])
    # chains of k = 3 for every method, the draft model's of k = 1 too and of k = 3 stopped at the
    # confidence 0.5, the two study trees with the drafter (here the draft model), and the learned
    # policy over n-gram and the draft model, run by the engine in lockstep with the chains of k = 3
    # of those two
    label = "learned:policy.json (ngram+draft)"
    assert sorted((r["method"], r["k"], r["tree"], r["tree_nodes"], r["confidence"], r["batch_size"], r["beside"])
                  for r in rows) == sorted(
        (m, k, tree, nodes, p, b, beside) for m, k, tree, nodes, p, beside in (
            ("ngram", "3", "", "", "", ""), ("draft", "3", "", "", "", ""), ("draft", "1", "", "", "", ""),
            ("draft", "3", "", "", "0.5", ""),
            ("draft", "6", "2x1x1", "6", "", ""), ("draft", "21", "3x2x1x1", "21", "", ""),  # a tree: k its nodes
            ("learned", "3", "", "", "", ""), ("ngram", "3", "", "", "", label), ("draft", "3", "", "", "", label))
        for b in ("1", "2"))
    from specscope.costmodel.registry import resolve_cost_model
    fitted = resolve_cost_model(str(out / "costmodel.json"))  # read back as simulate reads it
    assert not {"c_confidence", "draft.c_confidence"} & set(fitted.not_separated)  # told from the passes
    assert "draft.c_tok" not in json.loads((out / "costmodel.json").read_text()).get("not_separated", [])
    assert all(r["simulated_speedup"] and r["error_pct"] for r in rows)
    assert {r["ran_on"] for r in rows} == {"cpu float32, 1 thread"}  # where the engine ran (a review: unsaid)
    # probe: a learned row said "learned, k = 3" alone: it names its policy file, methods and hash
    assert all(r["policy"] == label and len(r["policy_sha256"]) == 16 for r in rows if r["method"] == "learned")
    assert "fidelity tree cells" in first and "fidelity learned cells" in first and "fidelity chain beside learned" in first
    assert re.search(r"learned echo: B=1: [\d.]+x \(best fixed beside it \w+ k=3: [\d.]+x, learned / it [\d.]+ "
                     r"median of 5 paired repeats, 93\.8 % interval [\d.]+ … [\d.]+: (faster|slower|no difference "
                     r"resolved); best fixed measured alone \w+ k=3: [\d.]+x\)", first), first
    assert re.search(r"learned against the best chain beside it, paired repeat by repeat: \d+ [a-z ]+(, \d+ [a-z ]+)* "
                     r"of 2 cells", first), first
    paired = list(csv.DictReader((out / "learned_vs_chains.csv").open()))  # the report's table of the same
    assert [(r["dataset"], r["batch_size"], r["chain"], r["repeats"]) for r in paired] == [
        ("echo", b, chain, "5") for b in ("1", "2") for chain in ("ngram k=3", "draft k=3")]
    assert all(float(r["low"]) <= float(r["learned_over_chain"]) <= float(r["high"]) for r in paired)
    assert json.loads((out / "policy.json").read_text())["methods"] == ["ngram", "draft"]
    learned_from = json.loads((out / "policy.json").read_text())["training"]["checkpoints"]  # an engine checks them
    assert learned_from and all(set(c) == {"model", "draft"} for c in learned_from)
    assert all(row["greedy_match"] for row in json.loads((out / "learned" / "echo.json").read_text()))
    # the policy's own work, priced from the steps where it decided a row (its gate may commit them all)
    steps = [json.loads(line) for line in (out / "learned" / "echo.steps.jsonl").read_text().splitlines()]
    decided = [s for s in steps if s["method"] == "learned" and s["tokens_verified"] and s["policy_rows"]]
    drafting = json.loads((out / "costmodel.json").read_text())["drafting"]
    assert ("learned" in drafting) == bool(decided)
    if decided:
        assert drafting["learned"]["c_fixed"] + drafting["learned"]["c_req"] > 0
        assert "the policy's own work per step: " in first and "none measured" not in first
    else:  # every request committed at admission: no work measured, none priced, and said
        assert any(m["gate"] for m in json.loads((out / "policy.json").read_text())["models"])
        assert "the policy's own work per step: none measured (its admission gates committed every request" in first
    html = (out / "index.html").read_text()
    assert "Measured against simulated" in html and re.search(r"fig\d+_measured\.png", html)
    assert "measured by this study: its measured/ and learned/ runs" in html and "(--measured" not in html
    assert "what the engine measured (on cpu float32, 1 thread)" in html
    assert "Static tree vs chain" in html and "3x2x1x1" in html  # the study's trees in the report
    chains = {(r["acc"], r["policy"]) for r in csv.DictReader((out / "speedup.csv").open())}
    assert ("draft", "fixed:4") in chains and ("ngram", "fixed:3") in chains  # the tree drafter: 4 deep (its trees)
    assert ("ngram", "fixed:4") not in chains  # n-gram's chains measured at k = 3 only (a review: priced k = 4 free)
    assert re.search(r"ngram[^<]*: fixed:4 not simulated: the study measured their chains of at most k = 3", html)
    assert "learned policy" in html  # the report's policy section
    kept = [*(out / "measured").iterdir(), *(out / "learned").iterdir(), out / "policy.json"]
    before = {str(p): p.stat().st_mtime_ns for p in kept}
    settings = json.loads((out / "study.json").read_text())
    assert len(settings["made_by"]) == 1  # the code that ran it, beside its settings
    (out / "study.json").write_text(json.dumps({**settings, "made_by": ["specscope 0.0 (git 0000000)"]}))
    assert main(argv) == 0  # resumes: nothing traced, measured or fitted again
    second = capsys.readouterr().out
    assert "note    this study was begun by specscope 0.0 (git 0000000): what those runs finished is kept as they made " \
           "it; this run is specscope" in second  # resumed by other code: said, and recorded
    assert json.loads((out / "study.json").read_text())["made_by"] == ["specscope 0.0 (git 0000000)", *settings["made_by"]]
    assert "already done" in second and "policy  fitted" not in second and "policy  policy.json kept" in second
    measured = [line for line in second.splitlines() if line.startswith("measure ")]  # each kept cell said, as kept
    assert measured and all(line.endswith("(measured before)") for line in measured)
    assert {str(p): p.stat().st_mtime_ns for p in kept} == before
    # other settings would mix their results with these: refused before any work, nothing changed
    other = [a if a != "1,2" else "1,4" for a in argv]
    assert main(other) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "batch_sizes [1, 2] → [1, 4]" in err[0], err
    assert {str(p): p.stat().st_mtime_ns for p in kept} == before
    # a replay on a GPU's cost model: its chains and trees, and where each tree stops beating its chain
    assert main([*argv, "--replay", "roofline:h100:llama3.1-8b:llama3.2-1b"]) == 0
    replayed = capsys.readouterr().out
    assert re.search(r"crossover roofline:h100:llama3.1-8b:llama3.2-1b echo \(draft, whole-run speedup\): 2x1x1 \(6 nodes\) vs chain "
                     r"fixed:3: ", replayed), replayed
    assert "chains compared stop at k = 0" not in replayed  # they had: the trees' chains keyed by dataset alone
    # a refitted policy.json: the learned cells measured with the old one are measured again
    policy = json.loads((out / "policy.json").read_text())
    policy["training"]["seed"] = 1  # another file, as a refit after remeasured cells would give
    (out / "policy.json").write_text(json.dumps(policy))
    assert main(argv) == 0
    assert "measured with another policy.json: measuring again" in capsys.readouterr().out
    # a run's step records cut short (the fit and fidelity table would change unsaid): refused, named
    steps = out / "measured" / "echo__ngram.steps.jsonl"
    whole = steps.read_text()
    steps.write_text("".join(whole.splitlines(keepends=True)[:3]))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "echo__ngram.steps.jsonl: holds 3 step records, its run recorded" in err[0], err
    steps.write_text(whole)
    # a report table edited by the user: refused before any stage (it was refused after the cost
    # model, fidelity table and replays were rewritten, leaving the old page's links broken)
    table = out / "speedup.csv"
    table.write_text(table.read_text() + "mine\n")
    settled = {name: (out / name).stat().st_mtime_ns for name in ("costmodel.json", "fidelity.csv", "index.html")}
    assert main([*argv, "--replay", "roofline:a100:llama3.1-8b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("speedup.csv was changed since the report wrote it: writing the report "
                                             "would replace or remove it; move it away"), err
    assert {name: (out / name).stat().st_mtime_ns for name in settled} == settled
    assert not list(out.glob("replay_roofline_a100*"))
    table.write_text(table.read_text()[: -len("mine\n")])  # (its digest again)
    fidelity = out / "fidelity.csv"  # the study's own table, edited: refused too (it was rewritten unsaid)
    fidelity.write_text(fidelity.read_text() + "mine\n")
    assert main(argv) == 2
    assert "fidelity.csv: exists, and specscope did not write it there (or it was changed since)" in \
        capsys.readouterr().err
    assert fidelity.read_text().endswith("mine\n")
    # a folder that is not a study's is not written into
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "costmodel.json").write_text("{}")
    assert main([*argv[:-1], str(tmp_path / "mine")]) == 2
    assert "holds no study.json" in capsys.readouterr().err and (tmp_path / "mine" / "costmodel.json").read_text() == "{}"


def test_a_policy_fitted_again_alike_once_its_work_is_priced_is_fitted_no_more_on_resume(target_and_draft, tmp_path,
                                                                                        capsys, monkeypatch):
    """A policy without gates decides every row, so its work is measured; fitted again with that
    price it chooses alike: kept (nothing measured again), and the check is recorded, so a
    resumed study neither fits nor measures it again."""
    import specscope.backends.reference as reference
    import specscope.study.run as run
    from specscope.sim.fit import fit_policy
    from specscope.trace import load_traces

    target, draft = target_and_draft
    workload = tmp_path / "echo.jsonl"
    prompts = [[5, 6, 7, 8, 5, 6, 7, 8, 5], [9, 10, 11, 9, 10, 11, 9], [3, 4, 3, 4, 3, 4], [20, 21, 22, 23]]
    workload.write_text("".join(json.dumps({"id": i, "prompt_token_ids": p}) + "\n" for i, p in enumerate(prompts)))
    argv = ["study", "--model", str(target), "--draft", str(draft), "--workload", str(workload), "--batch-sizes",
            "1,2", "--max-tokens", "12", "--k-max", "4", "--threads", "1", "-o", str(tmp_path / "study")]
    fits, benches, bench = [], [], reference.run_bench

    def without_gates(config, traces, methods, cost):  # the study's fit, its gates left out
        fits.append(1)
        return fit_policy(load_traces(traces)[0], tuple(methods), cost, config.batch_sizes,
                          sources=[run.workload_stem(t) for t in traces], max_k=config.k, gate="none")

    monkeypatch.setattr(run, "fit_study_policy", without_gates)
    monkeypatch.setattr(reference, "run_bench", lambda config, *a, **k: benches.append(config.method) or bench(
        config, *a, **k))
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert len(fits) == 2 and benches.count("learned") == 1  # fitted, measured, fitted again alike: kept
    assert "policy  policy.json chooses alike with its own work priced" in first
    assert (tmp_path / "study" / "policy_refit.json").is_file()
    fits.clear(), benches.clear()
    assert main(argv) == 0
    assert fits == [] and benches == [] and "chooses alike" not in capsys.readouterr().out


def test_the_policy_keeps_the_drafter_measured_fastest_over_every_cell(tmp_path):
    """EAGLE 1.2× and 1.1×, MTP 1.3× and 1.0× (geometric means 1.149 and 1.140; a tree cell of
    MTP at 2× is not a chain, nor is its chain of the second k, measured on one workload, among
    the chains of k): EAGLE. With MTP's second cell at 1.05×: MTP (1.168)."""
    from specscope.analysis.measured import MeasuredCell
    from specscope.study.config import StudyConfig

    config = StudyConfig(model_dir=tmp_path, workloads=[], out_dir=tmp_path, drafters={"mtp": tmp_path, "eagle": tmp_path})

    def cells(mtp_second: float) -> list:
        return [MeasuredCell("w", "eagle", 3, 1, 1.2), MeasuredCell("w", "eagle", 3, 4, 1.1),
                MeasuredCell("w", "mtp", 3, 1, 1.3), MeasuredCell("w", "mtp", 3, 4, mtp_second),
                MeasuredCell("w", "mtp", 3, 1, 2.0, tree="2x1x1"), MeasuredCell("w", "ngram", 3, 1, 3.0),
                MeasuredCell("w", "mtp", 1, 1, 2.0)]

    assert config.policy_methods(cells(1.0)) == ("ngram", "eagle")
    assert config.policy_methods(cells(1.05)) == ("ngram", "mtp")


def test_the_traces_keep_the_drafts_probability_as_deep_as_the_study_proposes(tmp_path):
    """``trace``'s default of 4 drafts, or the study's k where deeper, at most k_max: under ``--k 5``
    the probabilities had been kept to 4, and the policy's confidence rule refused the fifth draft."""
    from specscope.study.config import StudyConfig

    def config(k: int, k_max: int = 10) -> StudyConfig:
        return StudyConfig(tmp_path, [], tmp_path, k=k, k_max=k_max)

    assert [config(k).draft_probs for k in (1, 3, 4, 5, 8)] == [4, 4, 4, 5, 8]
    assert config(12).draft_probs == 10 and config(2, k_max=3).draft_probs == 3


def test_each_model_drafter_is_measured_at_a_second_k_and_at_a_confidence_on_the_first_workload(tmp_path, capsys):
    """Chains of k on every workload, the trees with the tree drafter, and each model drafter's
    chain of the second k, then its chain of k stopped at the confidence p, on the first workload
    only (after its trees, before the next workload), each named apart; no second k where it is 0
    or not below k, which the command line refuses in one line; no confidence chain where p is 0."""
    from specscope.cli import main
    from specscope.study.config import StudyConfig
    from specscope.study.run import measured_runs, run_label

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    config = StudyConfig(tmp_path, [a, b], tmp_path, drafters={"mtp": tmp_path, "draft": tmp_path}, k=3, second_k=1,
                         confidence_p=0.5)
    runs = [(w.name, m, t and t.name, k, p) for w, m, t, k, p in measured_runs(config)]
    first = [("a.jsonl", m, None, 3, None) for m in ("ngram", "mtp", "draft")] + [
        ("a.jsonl", "mtp", "2x1x1", 3, None), ("a.jsonl", "mtp", "3x2x1x1", 4, None)]
    assert runs == [*first, ("a.jsonl", "mtp", None, 1, None), ("a.jsonl", "draft", None, 1, None),
                    ("a.jsonl", "mtp", None, 3, 0.5), ("a.jsonl", "draft", None, 3, 0.5),
                    *((("b.jsonl",) + run[1:]) for run in first)]
    labels = [run_label(config, run) for run in measured_runs(config)]
    assert labels[:len(first) + 4] == ["ngram", "mtp", "draft", "mtp-tree-2x1x1", "mtp-tree-3x2x1x1", "mtp-k1",
                                       "draft-k1", "mtp-p0.5", "draft-p0.5"]
    for second_k in (0, 3):
        config.second_k = second_k
        assert config.second_k_drafters == [] and len(measured_runs(config)) == 2 * len(first) + 2
    config.confidence_p = 0.0
    assert config.confidence_drafters == [] and len(measured_runs(config)) == 2 * len(first)
    assert main(["study", "--k", "2", "--second-k", "2", "-o", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["specscope: error: --second-k 2: expected below --k 2 (0: no second k), the chains of --k being "
                   "the study's deepest"], err
    assert not (tmp_path / "s").exists()


def test_a_study_refused_before_its_first_result_takes_new_settings(target_and_draft, tmp_path):
    """A folder holding only the settings (and the workloads' copies, which follow them) of a
    study that was refused at once takes corrected settings; one holding a result does not —
    nor does it take another checkpoint under a drafter's name (probe: a drafter changed, its
    traces redone, kept the cells measured with the old one: fidelity 8/12 within 10 %, not 12/12)."""
    import shutil

    from specscope.study.config import StudyConfig
    from specscope.study.pipeline import check_resume

    target, draft = target_and_draft
    out = tmp_path / "study"
    first = StudyConfig(model_dir=target, workloads=[], out_dir=out, drafters={"draft": draft})
    check_resume(first)
    first.workloads_dir.mkdir()
    corrected = StudyConfig(model_dir=target, workloads=[], out_dir=out, drafters={"draft": draft})
    corrected.max_tokens = first.max_tokens // 2
    check_resume(corrected)  # nothing measured yet: nothing to mix
    assert json.loads(first.settings_path.read_text())["max_tokens"] == corrected.max_tokens
    (out / "traces").mkdir()  # a stage refused before its first record made its folder, nothing in it
    emptied = StudyConfig(model_dir=target, workloads=[], out_dir=out, drafters={"draft": draft})
    check_resume(emptied)  # (it refused the corrected rerun: "holds a study with other settings")
    (out / "traces" / "code.jsonl").write_text("{}\n")
    again = StudyConfig(model_dir=target, workloads=[], out_dir=out, drafters={"draft": draft})
    again.max_tokens = corrected.max_tokens // 2
    with pytest.raises(SpecscopeError, match="holds a study with other settings"):
        check_resume(again)
    other = tmp_path / "other-draft"
    shutil.copytree(target, other)  # another checkpoint under the name 'draft'
    with pytest.raises(SpecscopeError, match="holds a study with other settings .*drafter_sha256"):
        check_resume(StudyConfig(model_dir=target, workloads=[], out_dir=out, drafters={"draft": other},
                                 max_tokens=corrected.max_tokens))


def test_a_study_kept_before_device_and_dtype_were_settings_ran_on_the_cpu_in_float32(target_and_draft, tmp_path):
    """study.json without device and dtype (every study before they were options) resumes as a
    CPU float32 study and records them; the same folder is refused to a GPU or bfloat16 rerun."""
    from specscope.study.config import StudyConfig
    from specscope.study.pipeline import check_resume

    target, _ = target_and_draft
    out = tmp_path / "study"
    config = StudyConfig(model_dir=target, workloads=[], out_dir=out)
    check_resume(config)
    settings = json.loads(config.settings_path.read_text())
    assert (settings["device"], settings["dtype"]) == ("cpu", "float32")
    del settings["device"], settings["dtype"]
    config.settings_path.write_text(json.dumps(settings))
    (out / "traces").mkdir()
    (out / "traces" / "code.jsonl").write_text("{}\n")  # a result: nothing may mix with it
    check_resume(config)
    assert json.loads(config.settings_path.read_text())["device"] == "cpu"
    config.settings_path.write_text(json.dumps(settings))
    for device, dtype in (("cuda", "float32"), ("cpu", "bfloat16")):
        other = StudyConfig(model_dir=target, workloads=[], out_dir=out, device=device, dtype=dtype)
        with pytest.raises(SpecscopeError, match="holds a study with other settings"):
            check_resume(other)


def test_a_study_kept_before_the_second_k_measured_none(target_and_draft, tmp_path):
    """study.json without second_k (every study before it was an option) ran no second k: its
    folder, holding a result, is refused to a rerun that would add those runs (its policy, fitted
    under prices they would change, would be kept beside them: a review), taken by one with
    --second-k 0; a second k the study does not measure (not below k) is recorded as 0."""
    from specscope.study.config import StudyConfig
    from specscope.study.pipeline import check_resume

    target, _ = target_and_draft
    out = tmp_path / "study"
    config = StudyConfig(model_dir=target, workloads=[], out_dir=out)
    check_resume(config)
    settings = json.loads(config.settings_path.read_text())
    assert settings["second_k"] == 1
    del settings["second_k"]
    config.settings_path.write_text(json.dumps(settings))
    (out / "traces").mkdir()
    (out / "traces" / "code.jsonl").write_text("{}\n")  # a result
    with pytest.raises(SpecscopeError, match="second_k 0 → 1.*start over; or resume it as it began, with --second-k 0$"):
        check_resume(config)
    check_resume(StudyConfig(model_dir=target, workloads=[], out_dir=out, second_k=0))
    assert json.loads(config.settings_path.read_text())["second_k"] == 0
    assert StudyConfig(model_dir=target, workloads=[], out_dir=out, k=1).settings()["second_k"] == 0


def test_the_replay_asks_no_k_beyond_the_traces():
    from specscope.sim.policies import held_to
    from specscope.study.run import REPLAY_POLICIES

    assert held_to(REPLAY_POLICIES, 20) == ("fixed:1", "fixed:3", "fixed:5", "adaptive", "oracle")
    assert held_to(REPLAY_POLICIES, 4) == ("fixed:1", "fixed:3", "fixed:4", "adaptive", "oracle")
    assert held_to(REPLAY_POLICIES, 1) == ("fixed:1", "adaptive", "oracle")


def test_the_studys_copy_of_a_workload_splits_lines_as_the_reader_does(tmp_path):
    """A prompt holding U+2028 (valid JSON) was split in two by str.splitlines: the study's copy
    was invalid JSON, and blank lines skipped moved every later line number."""
    from specscope.study.run import first_requests
    from specscope.workloads.jsonl import read_prompts

    workload = tmp_path / "w.jsonl"
    lines = [json.dumps({"id": "a", "prompt": "x\u2028y"}, ensure_ascii=False), "", json.dumps({"id": "b", "prompt": "z"}),
             json.dumps({"id": "c", "prompt": "q"})]
    workload.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "copy").mkdir()
    copy = first_requests(workload, 2, tmp_path / "copy")
    assert [(p.id, p.line) for p in read_prompts(copy)] == [("a", 1), ("b", 3)]


def test_replays_keep_to_the_batch_sizes_the_workloads_can_fill():
    """16 requests a workload: the replays asked for B = 32 and 128 too, each dropped with a
    warning per dataset, and the tree crossover read "no crossover" past B = 16 unsimulated."""
    from types import SimpleNamespace

    from specscope.study.run import _fillable

    records = [SimpleNamespace(dataset=d) for d in ("code", "math") for _ in range(16)]
    said = []
    assert _fillable("chain", (1, 8, 32, 128), records, said.append) == (1, 8)
    assert said == ["replay  chain replay at batch sizes 1,8,32,128: 32,128 left out, a workload holds 16 requests "
                    "(give more with --requests)"]
    assert _fillable("tree", (1, 8), records, said.append) == (1, 8) and len(said) == 1


def test_a_replay_of_an_earlier_run_is_not_left_beside_this_runs(tmp_path):
    """`--replay` is not a setting a resume compares: a replay another run asked for stayed in the
    folder beside this run's, as if this run had made it. It is removed, said — and only what the
    study wrote (its list): a user's replay_mine.csv there was removed too."""
    from types import SimpleNamespace

    from specscope import written
    from specscope.fingerprint import file_sha256
    from specscope.study.run import REPLAYS, replay_stage

    for old in ("replay_old_model.csv", "replay_old_model_trees.csv"):  # as the study wrote them (its record)
        (tmp_path / old).write_text("stale\n")
        written.record_file(tmp_path / old, file_sha256(tmp_path / old))
    (tmp_path / REPLAYS).write_text("replay_old_model.csv\nreplay_old_model_trees.csv\n")
    (tmp_path / "replay_mine.csv").write_text("mine\n")
    config = SimpleNamespace(replay_cost_models=(), out_dir=tmp_path)
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"schema": "specscope.trace/1", "id": "a", "dataset": "d", "k_max": 2,
                                 "prompt_token_ids": [1], "output_token_ids": [2, 3],
                                 "proposers": {"ngram": {"acc_len": [2, 1]}}}) + "\n")
    said = []
    assert replay_stage(config, [trace], said.append) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == [REPLAYS, written.LEDGER, "replay_mine.csv", "t.jsonl"]
    assert "replay  removed replay_old_model.csv: an earlier run's --replay, not asked for by this one" in said


def test_a_replay_table_edited_since_the_study_wrote_it_is_neither_replaced_nor_removed(tmp_path):
    """A review: a replay table the user added to was removed by a run without its --replay ("an
    earlier run's --replay") and replaced by a rerun of the same one, unsaid, where fidelity.csv
    beside it is refused. Each is refused as fidelity.csv is, in a line, and kept as the user left it."""
    from types import SimpleNamespace

    from specscope.study.run import REPLAYS, replay_stage

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"schema": "specscope.trace/1", "id": i, "dataset": "d", "k_max": 2,
                                         "prompt_token_ids": [1], "output_token_ids": [2, 3, 4],
                                         "proposers": {"ngram": {"acc_len": [2, 1, 1]}}}) + "\n" for i in ("a", "b")))
    replaying = SimpleNamespace(replay_cost_models=("h100-llama3.1-8b",), out_dir=tmp_path, methods=["ngram"],
                                k_max=2, tree_drafter=None)
    said: list[str] = []
    replay_stage(replaying, [trace], said.append)
    table = tmp_path / "replay_h100-llama3.1-8b.csv"
    ours = table.read_text()
    replay_stage(replaying, [trace], said.append)  # its own table, unchanged: replaced
    table.write_text(ours + "my,annotation\n")
    with pytest.raises(SpecscopeError, match=r"replay_h100-llama3\.1-8b\.csv: exists, and specscope did not write it "
                                             r"there \(or it was changed since\): it would be replaced"):
        replay_stage(replaying, [trace], said.append)
    other = SimpleNamespace(replay_cost_models=(), out_dir=tmp_path)
    with pytest.raises(SpecscopeError, match=r"replay_h100-llama3\.1-8b\.csv: exists, and specscope did not write it "
                                             r"there \(or it was changed since\): it would be removed \(an earlier "
                                             r"run's --replay, not asked for by this one\); move it away"):
        replay_stage(other, [trace], said.append)
    assert table.read_text() == ours + "my,annotation\n" and (tmp_path / REPLAYS).read_text().split() == [table.name]
    mine = tmp_path / "replay_roofline_mine.csv"  # a user's table under a replay's name, never the study's: refused
    mine.write_text("model,speedup\nmine,2\n")
    with pytest.raises(SpecscopeError, match="replay_roofline_mine.csv: exists, and specscope did not write it"):
        replay_stage(SimpleNamespace(**{**vars(replaying), "replay_cost_models": ("roofline:mine",)}), [trace],
                     said.append)
    assert mine.read_text() == "model,speedup\nmine,2\n"
    table.write_text(ours)  # as the study wrote it: removed, said
    assert replay_stage(other, [trace], said.append) == {} and not table.exists()
    assert said[-1] == "replay  removed replay_h100-llama3.1-8b.csv: an earlier run's --replay, not asked for by this one"


def test_an_older_studys_replay_tables_are_still_its_own(tmp_path):
    """A study folder from before replay tables were recorded (its .replays lists them, the
    folder's record of what specscope wrote does not): a rerun replaces them and one without
    their --replay removes them, as before — they were refused as a user's (a re-review)."""
    from types import SimpleNamespace

    from specscope.study.run import REPLAYS, replay_stage

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"schema": "specscope.trace/1", "id": "a", "dataset": "d", "k_max": 2,
                                 "prompt_token_ids": [1], "output_token_ids": [2, 3, 4],
                                 "proposers": {"ngram": {"acc_len": [2, 1, 1]}}}) + "\n")
    table = tmp_path / "replay_h100-llama3.1-8b.csv"
    table.write_text("policy,speedup\nfixed:1,1.2\n")  # as an older study left it
    (tmp_path / REPLAYS).write_text(table.name + "\n")
    said: list[str] = []
    replaying = SimpleNamespace(replay_cost_models=("h100-llama3.1-8b",), out_dir=tmp_path, methods=["ngram"],
                                k_max=2, tree_drafter=None)
    replay_stage(replaying, [trace], said.append)
    assert table.read_text() != "policy,speedup\nfixed:1,1.2\n"  # replaced by this run's table, now recorded
    table.write_text("policy,speedup\nfixed:1,1.2\n")
    (tmp_path / ".specscope-outputs").unlink()  # an older study again
    assert replay_stage(SimpleNamespace(replay_cost_models=(), out_dir=tmp_path), [trace], said.append) == {}
    assert not table.exists() and said[-1].startswith("replay  removed replay_h100-llama3.1-8b.csv")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "annotated.csv").write_text("policy,speedup,my_comment\n")  # a link to a user's file: never its own
    table.symlink_to(notes / "annotated.csv")
    (tmp_path / REPLAYS).write_text(table.name + "\n")
    with pytest.raises(SpecscopeError, match="specscope did not write it there"):
        replay_stage(replaying, [trace], said.append)
    assert (notes / "annotated.csv").read_text() == "policy,speedup,my_comment\n"


def test_a_measured_runs_step_records_deleted_are_refused_not_left_out(tmp_path):
    """A review: a measured (or learned) run whose .steps.jsonl was deleted was kept as "measured
    before" and the cost model fitted without its steps (3017 of 3134), exit 0, unsaid. Its rows
    recorded the count: refused in a line naming the file and what to delete, as a file cut short is."""
    from specscope.study.run import checked_steps

    for folder, run in ((tmp_path / "measured", "code__ngram"), (tmp_path / "learned", "code")):
        folder.mkdir()
        (folder / f"{run}.json").write_text(json.dumps([{"batch_size": 1, "step_records": 2},
                                                        {"batch_size": 2, "step_records": 2}]))
        (folder / f"{run}.steps.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
        assert checked_steps(folder) == [folder / f"{run}.steps.jsonl"]
        (folder / f"{run}.steps.jsonl").unlink()
        with pytest.raises(SpecscopeError) as refused:
            checked_steps(folder)
        assert str(refused.value) == (f"{folder / run}.steps.jsonl: missing, the step records of the run in {run}.json "
                                      f"(it recorded 2); delete {run}.json to measure that run again")
    (tmp_path / "measured" / "code__ngram.json").write_text(json.dumps([{"batch_size": 1}]))  # before the count was kept
    with pytest.raises(SpecscopeError, match=r"code__ngram\.steps\.jsonl: missing, the step records of the run in "
                                             r"code__ngram\.json; delete code__ngram\.json to measure"):
        checked_steps(tmp_path / "measured")


def test_a_replay_names_the_drafters_its_cost_model_cannot_price(tmp_path):
    """Probe: the paper's fit prices no MTP head: the study's replay on it left MTP out (the best
    drafter the study measured), unsaid, and named its best 'best non-oracle'."""
    from types import SimpleNamespace

    from specscope.study.run import replay_stage

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"schema": "specscope.trace/1", "id": i, "dataset": "d", "k_max": 2,
                                         "prompt_token_ids": [1], "output_token_ids": [2, 3, 4],
                                         "proposers": {"ngram": {"acc_len": [2, 1, 1]}, "mtp": {"acc_len": [3, 2, 1]}}})
                         + "\n" for i in ("a", "b")))
    config = SimpleNamespace(replay_cost_models=("h100-llama3.1-8b",), out_dir=tmp_path, methods=["ngram", "mtp"],
                             k_max=2, tree_drafter=None)
    said = []
    replay_stage(config, [trace], said.append)
    assert "replay  h100-llama3.1-8b: mtp left out: the cost model prices no drafting of it" in said


def test_a_second_study_into_a_running_ones_folder_is_refused_before_it_touches_its_settings(tmp_path):
    """Probe and review: two studies into one folder measured at once, and the second, refused
    only after its settings check, had already rewritten the first's study.json."""
    from specscope.errors import SpecscopeError
    from specscope.fileio import exclusive
    from specscope.study.config import StudyConfig
    from specscope.study.pipeline import LOCK, run_study

    out = tmp_path / "study"
    out.mkdir()
    (out / "study.json").write_text('{"schema": "specscope.study/1", "k": 3}\n')
    second = StudyConfig(model_dir=tmp_path, workloads=[], out_dir=out, drafters={}, k=2)
    with exclusive(out / LOCK, "held"):  # as a running study holds it
        with pytest.raises(SpecscopeError, match="another study is running into this folder"):
            run_study(second, lambda line: None)
    assert (out / "study.json").read_text() == '{"schema": "specscope.study/1", "k": 3}\n'


def test_a_folder_whose_study_json_is_no_studys_is_not_taken_over(target_and_draft, tmp_path):
    """Probe: any JSON object named study.json (even {}) made a folder a study's to write into."""
    from specscope.errors import SpecscopeError
    from specscope.study.config import StudyConfig
    from specscope.study.pipeline import run_study

    out = tmp_path / "theirs"
    out.mkdir()
    (out / "study.json").write_text("{}\n")
    with pytest.raises(SpecscopeError, match="holds no study's settings"):
        run_study(StudyConfig(model_dir=target_and_draft[0], workloads=[], out_dir=out, drafters={}), lambda line: None)
    assert sorted(p.name for p in out.iterdir()) == ["study.json"]


def test_a_folder_refused_as_no_studys_keeps_its_workloads_and_empty_folders(target_and_draft, tmp_path):
    """A review: a folder holding only a workloads/ folder (the user's own workload in it) and an
    empty folder was refused as no study's — and the refusal removed both, the workload with them.
    A refused run removes only what it made; and a workload in the study's own workloads/ folder
    is refused (its copy of the first requests would replace it)."""
    from specscope.errors import SpecscopeError
    from specscope.study.config import StudyConfig
    from specscope.study.pipeline import run_study
    from specscope.workloads.bundled import bundled_path

    out = tmp_path / "proj"
    (out / "workloads").mkdir(parents=True)
    (out / "empty").mkdir()
    mine = out / "workloads" / "mine.jsonl"
    mine.write_text(bundled_path("code").read_text())
    config = StudyConfig(model_dir=target_and_draft[0], workloads=[mine], out_dir=out, drafters={}, requests=2)
    with pytest.raises(SpecscopeError, match="not empty and holds no study.json"):
        run_study(config, lambda line: None)
    assert sorted(p.name for p in out.rglob("*")) == ["empty", "mine.jsonl", "workloads"]
    assert mine.read_text() == bundled_path("code").read_text()
    from specscope.study.run import workloads_stage

    with pytest.raises(SpecscopeError, match="in the study's workloads/ folder"):
        workloads_stage(config)
    assert mine.read_text() == bundled_path("code").read_text()


def test_a_learned_runs_file_cut_short_is_refused_in_a_line(tmp_path):
    """A review: a truncated learned/<workload>.json raised a JSONDecodeError traceback."""
    from specscope.errors import SpecscopeError
    from specscope.study.run import _rows

    cut = tmp_path / "code.json"
    cut.write_text('[{"method": "learned", "pol')
    with pytest.raises(SpecscopeError, match=r"code\.json:1: invalid JSON"):
        _rows(cut)
    cut.write_text("[1]")
    with pytest.raises(SpecscopeError, match="expected a measured run's rows"):
        _rows(cut)


def test_a_study_refused_in_its_stages_before_a_result_leaves_nothing(tmp_path, capsys):
    """Refused at the trace stage (a head given as the draft model; --max-tokens past the model's
    positions): a folder the run made is gone, one that existed is left as it was found — a
    corrected rerun starts (it was refused: "holds a study with other settings")."""
    from specscope.cli import main
    from specscope.workloads.bundled import bundled_path
    from specscope.zoo.shipped import model_dir

    common = ["study", "--model", str(model_dir("target")), "--workload", str(bundled_path("code")), "--requests", "4",
              "--batch-sizes", "1,2"]
    assert main([*common, "--max-tokens", "8", "--draft", str(model_dir("eagle")), "-o", str(tmp_path / "made")]) == 2
    assert not (tmp_path / "made").exists()
    assert "the weights look like an EAGLE, EAGLE-3 or MTP head, not a whole model" in capsys.readouterr().err
    (tmp_path / "found").mkdir()
    assert main([*common, "--max-tokens", "100000", "--draft", str(model_dir("draft")), "-o", str(tmp_path / "found")]) == 2
    assert "exceed the 1024 positions" in capsys.readouterr().err
    assert list((tmp_path / "found").iterdir()) == []


def test_a_request_count_that_takes_every_request_is_the_study_without_one(tmp_path, monkeypatch):
    """--requests 4 over a workload of 4 requests studies what no --requests does: the same
    settings, so that resuming one as the other is no "other settings" refusal (it was)."""
    import specscope.study.pipeline as pipeline
    from specscope.cli import main
    from specscope.workloads.bundled import bundled_path
    from specscope.zoo.shipped import model_dir

    workload = tmp_path / "w.jsonl"
    workload.write_text("".join(bundled_path("code").read_text().splitlines(keepends=True)[:4]))
    seen = []
    monkeypatch.setattr(pipeline, "run_study", lambda config, say: seen.append(config.settings()))
    common = ["study", "--model", str(model_dir("target")), "--workload", str(workload), "--batch-sizes", "1,2",
              "-o", str(tmp_path / "s")]
    assert main(common) == 0 and main([*common, "--requests", "4"]) == 0 and main([*common, "--requests", "9"]) == 0
    assert seen[0] == seen[1] == seen[2] and seen[0]["requests"] is None
    assert main([*common, "--requests", "3"]) == 0 and seen[3]["requests"] == 3


def test_a_fit_of_too_few_steps_says_which_study_options_measure_more(tmp_path):
    """--requests 1 --max-tokens 2 traced and measured, then stopped at the fit with a message that
    named no option of the study (no more steps could come from anything it said)."""
    from types import SimpleNamespace

    from specscope.study.run import fit_stage

    steps = [{"step": i, "method": "none", "k": 0, "batch_size": 1, "tokens_verified": 1, "tokens_emitted": [1],
              "draft_s": 0.0, "verify_s": 0.004, "sample_s": 0.0, "overhead_s": 0.0, "kv_tokens": 30 + i,
              "prefill_tokens": 0, "prefill_s": 0.0} for i in range(2)]
    (tmp_path / "w__none.steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (tmp_path / "w__none.json").write_text(json.dumps([{"step_records": 2}]))
    config = SimpleNamespace(measure_dir=tmp_path, model_dir=tmp_path / "target", cost_model_path=tmp_path / "m.json",
                             device="cpu", dtype="float32")
    with pytest.raises(SpecscopeError, match=r"study: fitting the cost model: 2 observed steps for .* more --requests or a larger "
                                             r"--max-tokens"):
        fit_stage(config, print)
    assert not (tmp_path / "m.json").exists()


def test_a_study_without_a_model_drafter_says_it_learns_no_policy(tmp_path):
    """The policy stage of a study of the target alone says why no policy is learned (it said
    nothing, where every other stage says what it did)."""
    from specscope.study.config import StudyConfig
    from specscope.study.run import policy_stage

    said: list[str] = []
    assert policy_stage(StudyConfig(tmp_path, [], tmp_path), [], [], None, said.append) == []
    assert said == ["policy  none learned: a policy chooses between n-gram and a model drafter, and this study runs "
                    "no model drafter (--draft, --eagle, --eagle3, --mtp)"]


def test_a_study_runs_its_batch_sizes_in_order_however_given(tmp_path):
    """A resume given --batch-sizes 2,1 was taken for the study of 1,2 (its settings sort them) but
    measured and printed in the order given: the order is the settings' own."""
    from specscope.study.config import StudyConfig

    config = StudyConfig(tmp_path, [], tmp_path, batch_sizes=(8, 1, 4))
    assert config.batch_sizes == (1, 4, 8)  # what the stages run, in the order study.json keeps them
