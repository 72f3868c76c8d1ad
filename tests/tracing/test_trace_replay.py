"""A trace replayed with fixed:k predicts exactly what the reference engine does (greedy)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")

from specscope.cli import main  # noqa: E402
from specscope.assemble import load_engine  # noqa: E402
from specscope.sim.plan import make_plan  # noqa: E402
from specscope.sim.policies import parse_policy  # noqa: E402
from specscope.trace import load_traces  # noqa: E402
from specscope.tracing.settings import settings_path  # noqa: E402
from specscope.version import code_version  # noqa: E402
from specscope.trees import TreeShape  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [9, 10, 11, 12, 13], [3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3]]


@pytest.fixture(scope="module")
def traced(target_and_draft, tmp_path_factory):
    target, draft = target_and_draft
    folder = tmp_path_factory.mktemp("work")
    workload = folder / "w.jsonl"
    workload.write_text("".join(json.dumps({"id": f"r{i}", "prompt_token_ids": p}) + "\n" for i, p in enumerate(PROMPTS)))
    out = folder / "traces.jsonl"
    assert main(["trace", "--model", str(target), "--proposers", f"ngram,draft={draft}", "--workload", str(workload),
                 "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", "-o", str(out)]) == 0
    return out, workload


def engine_steps(target, method, draft, k, prompt, max_tokens):
    engine, _ = load_engine(target, method, draft, k=k, max_batch_size=1, max_seq_len=64)
    engine.add_request("r", prompt, max_tokens)
    tokens = []
    while engine.num_running():
        for out in engine.step():
            tokens.extend(out.new_token_ids)
    return tokens, engine.stats.num_request_steps


@pytest.mark.parametrize("method", ["ngram", "draft"])
@pytest.mark.parametrize("k", [1, 3])
def test_replay_predicts_engine_steps_and_tokens(traced, target_and_draft, method, k):
    out, _ = traced
    target, draft = target_and_draft
    records, _ = load_traces([out])
    for record in records:
        trace = record.proposers[method]
        plan = make_plan([trace.acc_len], [record.prompt_len], parse_policy(f"fixed:{k}"), 6,
                         draft_lens=[trace.draft_len])
        tokens, steps = engine_steps(target, method, draft if method == "draft" else None, k,
                                     record.prompt_token_ids.tolist(), 40)
        assert tokens == record.output_token_ids.tolist()
        assert steps == len(plan.pos), (record.id, method, k)


def test_traces_have_acceptance_and_align(traced):
    out, _ = traced
    records, (report,) = load_traces([out])
    assert report.mismatched_records == 0 and len(records) == 3
    for record in records:
        assert record.k_max == 6 and record.dataset == "w"
        for trace in record.proposers.values():
            assert len(trace.acc_len) == record.output_len
            assert np.all(trace.acc_len <= trace.draft_len + 1)
    assert max(int(r.proposers["draft"].acc_len.max()) for r in records) > 1  # the draft is often right
    for record in records:  # the draft model's confidence in its first 4 drafts (--draft-probs); n-gram has none
        prob = record.proposers["draft"].draft_prob
        assert prob.shape == (record.output_len, 4) and np.all((prob > 0) & (prob <= 1))
        assert record.proposers["ngram"].draft_prob is None


def test_trace_resumes_without_redoing_or_losing(traced, target_and_draft, tmp_path, capsys):
    out, workload = traced
    target, draft = target_and_draft
    lines = out.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write
    settings = json.loads(settings_path(out).read_text())
    assert settings["made_by"] == [code_version()]
    older = {key: value for key, value in settings.items() if key != "batch_size"}  # kept since
    settings_path(partial).write_text(json.dumps({**older, "made_by": ["specscope 0.0.9"]}))  # traced by older code
    assert main(["trace", "--model", str(target), "--proposers", f"ngram,draft={draft}", "--workload", str(workload),
                 "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", "-o", str(partial)]) == 0
    assert f"resumed by {code_version()}; its earlier records by specscope 0.0.9" in capsys.readouterr().err
    assert json.loads(settings_path(partial).read_text())["made_by"] == ["specscope 0.0.9", code_version()]
    assert json.loads(settings_path(partial).read_text())["batch_size"] == 2  # recorded now
    # r1 is traced again in its batch with r0, as the whole run traced it: byte for byte the same (traced in a batch
    # of its own, its draft probabilities moved in the sixth decimal)
    assert partial.read_bytes() == out.read_bytes()


def test_a_trace_is_listed_as_specscopes_so_a_later_run_may_replace_it(traced, tmp_path, capsys):
    """`specscope trace` lists the trace it made in its folder's record of what specscope wrote: a
    later `-o` may replace it (it was refused as a user's), and one naming it as its own input is
    told so; a copy made by hand stays the user's."""
    from specscope.fingerprint import file_sha256
    from specscope.written import listed

    out, _ = traced
    assert listed(out, file_sha256(out))
    assert main(["traces", "convert", str(out), "--rename", "draft=eagle", "-o", str(out)]) == 2
    assert "is also an input" in capsys.readouterr().err
    mine = tmp_path / "t.jsonl"
    shutil.copy(out, mine)
    assert main(["traces", "convert", str(out), "--rename", "draft=eagle", "-o", str(mine)]) == 2
    assert "specscope did not write it" in capsys.readouterr().err


def test_a_resume_refuses_a_record_of_no_request_of_the_workload(traced, target_and_draft, tmp_path, capsys):
    """A record whose id the workload does not hold (edited in by hand) was kept beside the rest."""
    out, workload = traced
    target, draft = target_and_draft
    lines = out.read_text().splitlines()
    edited = tmp_path / "edited.jsonl"
    edited.write_text(lines[0] + "\n" + lines[1].replace('"id":"r1"', '"id":"r9"') + "\n")
    settings_path(edited).write_bytes(settings_path(out).read_bytes())
    before = edited.read_bytes()
    assert main(["trace", "--model", str(target), "--proposers", f"ngram,draft={draft}", "--workload", str(workload),
                 "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", "-o", str(edited)]) == 2
    assert "record 'r9' was not traced with this file's settings (no request of the workload its settings name)" \
        in capsys.readouterr().err
    assert edited.read_bytes() == before


def test_a_resume_refuses_records_another_command_wrote_under_the_settings(traced, target_and_draft, tmp_path, capsys):
    """`traces convert -o` over a trace left its settings file beside the new records (n-gram alone,
    k_max 4, another dataset), and the rerun of the trace "resumed" onto them: a mixed trace. Now the
    convert forgets the settings it replaced (the rerun traces afresh), and a record that disagrees
    with the settings beside it is refused, naming it and what differs."""
    out, workload = traced
    target, draft = target_and_draft
    trace = tmp_path / "t.jsonl"
    command = ["trace", "--model", str(target), "--proposers", f"ngram,draft={draft}", "--workload", str(workload),
               "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", "-o", str(trace)]
    assert main(command) == 0
    assert main(["traces", "convert", str(out), "--rename", "draft=eagle", "-o", str(trace)]) == 0
    assert not settings_path(trace).exists()  # the settings of records that are gone
    assert main(command) == 2  # records without settings: refused, kept
    assert "no settings file" in capsys.readouterr().err
    settings_path(trace).write_bytes(settings_path(out).read_bytes())  # by hand: settings beside other records
    before = trace.read_bytes()
    assert main(command) == 2
    assert "record 'r0' was not traced with this file's settings (its proposers ['eagle', 'ngram'], where its " \
           "settings say ['draft', 'ngram'])" in capsys.readouterr().err
    assert trace.read_bytes() == before


def test_overwrite_keeps_the_old_trace_until_the_new_one_has_records(traced, target_and_draft, tmp_path, capsys):
    """--overwrite with a checkpoint that does not load emptied the old trace before it failed:
    now the old records and their settings stay until the first new batch is ready; -o the
    workload itself is refused (--overwrite would empty it), and a folder that cannot be
    written is one line, not a traceback."""
    out, workload = traced
    target, draft = target_and_draft
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(out.read_bytes())
    settings_path(copy).write_bytes(settings_path(out).read_bytes())
    before, settings = copy.read_bytes(), settings_path(copy).read_bytes()
    broken = tmp_path / "broken"
    shutil.copytree(draft, broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["trace", "--model", str(target), "--proposers", f"ngram,draft={broken}", "--workload", str(workload),
                 "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", "-o", str(copy), "--overwrite"]) == 2
    capsys.readouterr()
    assert copy.read_bytes() == before and settings_path(copy).read_bytes() == settings
    assert main(["trace", "--model", str(target), "--proposers", "ngram", "--workload", str(workload), "--k-max", "6",
                 "--max-tokens", "40", "-o", str(workload), "--overwrite"]) == 2
    assert "is also an input" in capsys.readouterr().err
    assert main(["trace", "--model", str(target), "--proposers", "ngram", "--workload", str(workload), "--k-max", "6",
                 "--max-tokens", "40", "-o", "/proc/specscope-nowhere/t.jsonl"]) == 2
    assert "cannot write the trace there" in capsys.readouterr().err


def test_resume_with_other_settings_is_refused_unless_overwrite(traced, target_and_draft, tmp_path, capsys):
    out, workload = traced
    target, draft = target_and_draft
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(out.read_bytes())
    settings_path(copy).write_bytes(settings_path(out).read_bytes())
    before = copy.read_bytes()
    settings = json.loads(settings_path(out).read_text())
    assert settings["k_max"] == 6 and settings["max_tokens"] == 40 and settings["proposers"][0] == "ngram"
    base = ["trace", "--model", str(target), "--workload", str(workload), "-o", str(copy)]
    for changed, named in ((["--proposers", f"ngram,draft={draft}", "--k-max", "5", "--max-tokens", "40"], "k_max was 6, now 5"),
                           (["--proposers", "ngram", "--k-max", "6", "--max-tokens", "40"], "proposers was"),
                           (["--proposers", f"ngram,draft={draft}", "--k-max", "6", "--max-tokens", "30"], "max_tokens was 40, now 30"),
                           (["--proposers", f"ngram,draft={draft}", "--k-max", "6", "--max-tokens", "40", "--batch-size", "3"],
                            "batch_size was 2, now 3"),  # batches of another size: draft_prob's last bits move
                           (["--proposers", f"ngram,draft={target}", "--k-max", "6", "--max-tokens", "40"],
                            f"proposers[1] was \"draft={draft}")):  # probe: the whole list, cut, read the same twice
        capsys.readouterr()
        assert main(base + (changed if "--batch-size" in changed else [*changed, "--batch-size", "2"])) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0] and "--overwrite" in err[0], err
        assert copy.read_bytes() == before
    assert main(base + ["--proposers", "ngram", "--k-max", "6", "--max-tokens", "40", "--batch-size", "2",
                        "--overwrite"]) == 0
    redone = [json.loads(line) for line in copy.read_text().splitlines()]
    assert len(redone) == 3 and all(set(r["proposers"]) == {"ngram"} for r in redone)
    assert json.loads(settings_path(copy).read_text())["proposers"] == ["ngram"]
    settings_path(copy).unlink()  # traces without their settings: nothing tells what they were traced with
    kept = copy.read_bytes()
    for extra in ([], ["--overwrite"]):  # nor who wrote them: kept even with --overwrite (a review: a user's copy
        # of the paper's traces was emptied)
        assert main(base + ["--proposers", "ngram", "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", *extra]) == 2
        err = capsys.readouterr().err
        assert "no settings file" in err and "delete it yourself" in err and copy.read_bytes() == kept
    settings_path(copy).write_text('{"model": "/x", "k_m')  # a damaged settings file: refused, then --overwrite starts over
    assert main(base + ["--proposers", "ngram", "--k-max", "6", "--max-tokens", "40", "--batch-size", "2"]) == 2
    assert "holds no trace settings (damaged?)" in capsys.readouterr().err
    assert main(base + ["--proposers", "ngram", "--k-max", "6", "--max-tokens", "40", "--batch-size", "2",
                        "--overwrite"]) == 0
    assert json.loads(settings_path(copy).read_text())["k_max"] == 6
    mine = tmp_path / "mine.txt"  # a user's file, not traces: kept even with --overwrite
    mine.write_text("precious\n")
    for extra in ([], ["--overwrite"]):
        assert main([*base[:-1], str(mine), "--proposers", "ngram", "--k-max", "6", "--max-tokens", "40", *extra]) == 2
        assert "exists and holds no trace records" in capsys.readouterr().err
        assert mine.read_text() == "precious\n" and not settings_path(mine).exists()


@pytest.fixture(scope="module")
def tree_traced(target_and_draft, tmp_path_factory):
    target, draft = target_and_draft
    folder = tmp_path_factory.mktemp("trees")
    workload = folder / "w.jsonl"
    workload.write_text("".join(json.dumps({"id": f"r{i}", "prompt_token_ids": p}) + "\n" for i, p in enumerate(PROMPTS)))
    out = folder / "traces.jsonl"
    assert main(["trace", "--model", str(target), "--proposers", f"draft={draft}", "--workload", str(workload),
                 "--k-max", "3", "--max-tokens", "40", "--batch-size", "2", "--trees", "2x2x1,3x1", "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("shape", ["2x2x1", "3x1", "1x1x1"])
def test_tree_replay_predicts_engine_steps_and_tokens(tree_traced, target_and_draft, shape):
    """A tree policy replayed from tree_rank takes exactly the steps the engine takes drafting
    and verifying that tree, and the engine's tokens are the traced output."""
    target, draft = target_and_draft
    records, _ = load_traces([tree_traced])
    assert json.loads(settings_path(tree_traced).read_text())["trees"] == ["2x2x1", "3x1"]
    tree = TreeShape.parse(shape)
    for record in records:
        ranks = record.proposers["draft"].tree_rank
        assert ranks.shape == (record.output_len, 3)
        plan = make_plan([tree.acc_len(ranks)], [record.prompt_len], parse_policy(f"tree:{shape}"), tree.depth)
        engine, _ = load_engine(target, "draft", draft, max_batch_size=1, max_seq_len=64, tree=tree)
        engine.add_request("r", record.prompt_token_ids.tolist(), 40)
        tokens = []
        while engine.num_running():
            for out in engine.step():
                tokens.extend(out.new_token_ids)
        assert tokens == record.output_token_ids.tolist()
        assert engine.stats.num_request_steps == len(plan.pos), (record.id, shape)


def test_a_prompt_token_outside_the_vocabulary_is_refused_before_anything_is_written(target_and_draft, tmp_path,
                                                                                    capsys):
    """Its third request out of the vocabulary: the first two were traced, then the run failed
    at the engine with no file named. Now refused at its line, before any record or settings."""
    target, _ = target_and_draft
    workload = tmp_path / "w.jsonl"
    workload.write_text("".join(json.dumps({"id": f"r{i}", "prompt_token_ids": [1, 2, 10**6 if i == 2 else 3]}) + "\n"
                                for i in range(3)))
    out = tmp_path / "t.jsonl"
    assert main(["trace", "--model", str(target), "--workload", str(workload), "--proposers", "ngram",
                 "--batch-size", "1", "--max-tokens", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{workload}:3: field 'prompt_token_ids': token id 1000000 is not below" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.jsonl"]


def test_a_users_file_where_the_settings_would_go_is_never_replaced(target_and_draft, tmp_path, capsys):
    target, _ = target_and_draft
    workload = tmp_path / "w.jsonl"
    workload.write_text(json.dumps({"id": "r0", "prompt_token_ids": [1, 2, 3]}) + "\n")
    mine = tmp_path / "t.jsonl.settings.json"
    mine.write_text("hello\n")
    for extra in ([], ["--overwrite"]):
        assert main(["trace", "--model", str(target), "--workload", str(workload), "--proposers", "ngram",
                     "--max-tokens", "4", "-o", str(tmp_path / "t.jsonl"), *extra]) == 2
        assert "t.jsonl.settings.json: exists and holds no trace settings" in capsys.readouterr().err
        assert mine.read_text() == "hello\n" and not (tmp_path / "t.jsonl").exists()


def test_a_second_trace_into_the_same_file_is_refused_while_the_first_runs(target_and_draft, tmp_path, capsys):
    """Two runs into one -o both wrote every record (each id twice; with other settings, mixed);
    the lock is the traces file itself, so a link to it is the same lock."""
    import fcntl

    target, _ = target_and_draft
    workload = tmp_path / "w.jsonl"
    workload.write_text(json.dumps({"id": "r0", "prompt_token_ids": [1, 2, 3]}) + "\n")
    out, link = tmp_path / "t.jsonl", tmp_path / "link.jsonl"
    out.write_text("")
    link.symlink_to(out)
    argv = ["trace", "--model", str(target), "--workload", str(workload), "--proposers", "ngram", "--max-tokens", "4",
            "-o"]
    with open(out, "a") as held:  # the first trace, still running
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for path in (out, link):
            assert main([*argv, str(path)]) == 2
            assert f"{path}: another trace is writing into it" in capsys.readouterr().err
        assert out.read_text() == ""
    assert main([*argv, str(link)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".specscope-outputs", "link.jsonl", "link.jsonl.settings.json",
                                                          "t.jsonl", "w.jsonl"]  # the ledger lists t.jsonl, the file linked
    assert len(out.read_text().splitlines()) == 1

def test_starting_over_keeps_a_symbolic_link_a_link(target_and_draft, tmp_path):
    target, _ = target_and_draft
    workload = tmp_path / "w.jsonl"
    workload.write_text(json.dumps({"id": "r0", "prompt_token_ids": [1, 2, 3]}) + "\n")
    (tmp_path / "store").mkdir()
    real, link = tmp_path / "store" / "t.jsonl", tmp_path / "t.jsonl"
    real.write_text("")
    link.symlink_to(real)
    argv = ["trace", "--model", str(target), "--workload", str(workload), "--proposers", "ngram", "--max-tokens", "4",
            "-o", str(link)]
    assert main(argv) == 0
    assert main([*argv[:-4], "--max-tokens", "3", "-o", str(link), "--overwrite"]) == 0
    assert link.is_symlink() and len(real.read_text().splitlines()) == 1


def test_an_interrupt_before_the_first_record_leaves_no_folder_it_made(traced, target_and_draft, tmp_path):
    """A review: `trace -o nd/sub/t.jsonl` stopped before its first record removed the empty trace
    and its settings but left nd/sub behind."""
    from specscope.tracing.run import ProposerSpec, trace_workload
    from specscope.workloads.jsonl import read_workload

    _, workload = traced
    target, _ = target_and_draft

    def interrupted(job, chunks):
        raise KeyboardInterrupt
        yield

    (tmp_path / "kept").mkdir()
    for output in (tmp_path / "nd" / "sub" / "t.jsonl", tmp_path / "kept" / "new" / "t.jsonl"):
        with pytest.raises(KeyboardInterrupt):
            trace_workload(target, ProposerSpec.parse_list("ngram"), read_workload(workload), output,
                           max_tokens=8, map_batches=interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not any((tmp_path / "kept").iterdir())


def test_draft_probs_keeps_as_many_probabilities_as_asked_and_a_resume_must_match(traced, target_and_draft,
                                                                                  tmp_path, capsys):
    """--draft-probs 6 keeps every draft's probability at k_max 6 (the first 4 by default), its
    settings say so, and its records are the default trace's but for the extra columns; resuming
    it at the default is refused naming the setting (its records would keep 4 beside 6)."""
    out, workload = traced
    target, draft = target_and_draft
    deep = tmp_path / "deep.jsonl"
    command = ["trace", "--model", str(target), "--proposers", f"ngram,draft={draft}", "--workload", str(workload),
               "--k-max", "6", "--max-tokens", "40", "--batch-size", "2", "-o", str(deep)]
    assert main([*command, "--draft-probs", "6"]) == 0
    assert json.loads(settings_path(deep).read_text())["draft_probs"] == 6
    assert "draft_probs" not in json.loads(settings_path(out).read_text())  # the default: as traces were before
    shallow, _ = load_traces([out])
    wide, _ = load_traces([deep])
    for a, b in zip(shallow, wide):
        prob = b.proposers["draft"].draft_prob
        assert prob.shape == (b.output_len, 6) and np.allclose(prob[:, :4], a.proposers["draft"].draft_prob)
        assert np.array_equal(a.proposers["draft"].acc_len, b.proposers["draft"].acc_len)
    lines = deep.read_text().splitlines()
    deep.write_text(lines[0] + "\n")
    capsys.readouterr()
    assert main(command) == 2
    assert "traced with other settings: draft_probs was 6, now the default (4, at most k_max)" in capsys.readouterr().err
    assert main([*command, "--draft-probs", "7"]) == 2  # past k_max: refused before any model is read
    assert "--draft-probs 7: at most --k-max (6)" in capsys.readouterr().err
    assert deep.read_text() == lines[0] + "\n"  # nothing the refusals touched
