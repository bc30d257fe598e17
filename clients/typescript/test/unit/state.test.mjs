// Durable state: the cursor only moves forward (unless reset), the processed record is bounded,
// and the JSON file survives a reopen, as a crashed and restarted process would see it.
import assert from "node:assert/strict";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { JsonFileState, MemoryState, Scan, SseParser } from "../../dist/node.js";

test("the cursor moves forward only, and a reset sets it exactly", async () => {
  const state = new MemoryState();
  assert.equal(await state.cursor("t/a"), 0);
  await state.advanceCursor("t/a", 5);
  await state.advanceCursor("t/a", 3);
  assert.equal(await state.cursor("t/a"), 5);
  assert.equal(await state.cursor("t/b"), 0, "per inbox");
  await state.resetCursor("t/a", 2);
  assert.equal(await state.cursor("t/a"), 2);
});

test("the processed record keeps the newest ids up to its capacity", async () => {
  const state = new MemoryState(3);
  for (const id of ["e1", "e2", "e3", "e4"]) await state.recordProcessed("t/a", id, 1, "completed");
  assert.equal(await state.processed("t/a", "e1"), null, "the oldest went");
  assert.equal(await state.processed("t/a", "e4"), "completed");
  await state.recordProcessed("t/a", "e5", 5, "failed");
  assert.equal(await state.processed("t/a", "e5"), "failed");
  assert.equal(await state.processed("t/b", "e5"), null);
});

test("the JSON file holds every change once its promise resolves, and reopens intact", async () => {
  const dir = await mkdtemp(join(tmpdir(), "inbox-state-"));
  try {
    const path = join(dir, "nested", "agent.json");
    const state = await JsonFileState.open(path, 100);
    // Concurrent changes coalesce into few writes; each promise resolves once its change is on disk.
    await Promise.all(Array.from({ length: 50 }, (_, i) => state.recordProcessed("t/a", `e${i}`, i + 1, "completed")));
    await state.advanceCursor("t/a", 42);
    const onDisk = JSON.parse(await readFile(path, "utf8"));
    assert.equal(Object.keys(onDisk.processed["t/a"]).length, 50);
    assert.equal(onDisk.cursors["t/a"], 42);
    await state.close();
    const reopened = await JsonFileState.open(path, 100);
    assert.equal(await reopened.cursor("t/a"), 42);
    assert.equal(await reopened.processed("t/a", "e49"), "completed");
    assert.deepEqual((await readdir(join(dir, "nested"))).filter((n) => n.endsWith(".tmp")), [], "no temporary files left");
    await writeFile(path, '{"something":"else"}');
    await assert.rejects(JsonFileState.open(path), (error) => error.code === "local_state" && /not an agent state file/.test(error.message));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

const envelope = (seq, ack_state, extra = {}) => ({
  event_id: `e${seq}`,
  inbox_seq: seq,
  ack_state,
  availability_at_utc: "2020-01-01T00:00:00Z",
  ...extra,
});

test("a scan moves the cursor over terminal events only and finds what is claimable", () => {
  const now = Date.parse("2030-01-01T00:00:00Z");
  const scan = new Scan(0);
  scan.addPage(
    [
      envelope(1, "acked"),
      envelope(2, "dead_letter"),
      envelope(3, "claimed", { event_id: "mine", visibility_lease_until_utc: "2030-01-01T00:00:10Z" }),
      envelope(4, "acked"),
      envelope(5, "available"),
      envelope(6, "retry_scheduled", { next_retry_at_utc: "2030-01-01T00:00:05Z" }),
      envelope(7, "claimed", { visibility_lease_until_utc: "2030-01-01T00:00:20Z" }),
    ],
    7,
    9,
    now,
    new Set(["mine"]),
  );
  assert.equal(scan.cursor, 2, "stops before the first open event");
  assert.equal(scan.claimable, 1);
  assert.equal(scan.nextChangeMs, now + 5_000, "the retry, not our own lease");
  assert.equal(scan.headSeq, 9);
  assert.equal(scan.seenThrough, 7);
  const empty = new Scan(3);
  empty.addPage([], 8, 8, now, new Set());
  assert.equal(empty.cursor, 8, "an empty page moves to next_cursor");
});

test("the event-stream parser handles any chunking, comments, CRLF and multi-line data", () => {
  const text = ': hello\r\nretry: 1000\r\n\r\nevent: inbox.updated\r\nid: 7\r\ndata: {"head_seq":7}\r\n\r\nevent: heartbeat\ndata: a\ndata: b\n\n';
  for (let size = 1; size <= text.length; size++) {
    const parser = new SseParser();
    const events = [];
    for (let i = 0; i < text.length; i += size) events.push(...parser.feed(text.slice(i, i + size)));
    assert.deepEqual(events, [
      { event: "inbox.updated", data: '{"head_seq":7}', id: "7" },
      { event: "heartbeat", data: "a\nb", id: "7" },
    ], `chunks of ${size}`);
  }
  assert.throws(() => new SseParser().feed("x".repeat(70_000)), RangeError);
});
