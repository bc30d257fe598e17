/**
 * Node's platform: state in a JSON file (written atomically, before the ack is sent), hint
 * streams read with `fetch` and a bearer header, no tabs, no lifecycle events.
 */

import { mkdir, open, readFile, rename } from "node:fs/promises";
import { dirname, join } from "node:path";

import { LocalStateError, NetworkError, ProblemError, ProtocolError } from "./errors.js";
import type { ProblemDocument } from "./errors.js";
import type { HintStream, LifecycleChange, Platform, StreamHandlers, StreamTarget } from "./platform.js";
import { SseParser } from "./sse.js";
import { MemoryState, PROCESSED_CAPACITY_DEFAULT } from "./state.js";
import type { LocalState, StateSnapshot } from "./state.js";

/**
 * State kept in one JSON file. Every change rewrites the file (to a temporary file, flushed,
 * then renamed over it), so a crash leaves the old or the new version, never a torn one.
 * Changes made while a write runs go out together in the next write. One process per file.
 */
export class JsonFileState extends MemoryState {
  readonly path: string;
  #writing: Promise<void> | null = null;
  #queued: Promise<void> | null = null;

  private constructor(path: string, capacity: number, snapshot: StateSnapshot | undefined) {
    super(capacity, snapshot);
    this.path = path;
  }

  /** Opens (creating) the state file at `path`. */
  static async open(path: string, capacity: number = PROCESSED_CAPACITY_DEFAULT): Promise<JsonFileState> {
    let snapshot: StateSnapshot | undefined;
    try {
      const text = await readFile(path, "utf8");
      const parsed: unknown = JSON.parse(text);
      if (!isSnapshot(parsed)) throw new LocalStateError(`${path} is not an agent state file; move it away`);
      snapshot = parsed;
    } catch (error) {
      if (error instanceof LocalStateError) throw error;
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") {
        throw new LocalStateError(`cannot read ${path}: ${(error as Error).message}`, { cause: error });
      }
    }
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    return new JsonFileState(path, capacity, snapshot);
  }

  protected override persist(): Promise<void> {
    if (this.#queued !== null) return this.#queued;
    if (this.#writing === null) {
      this.#writing = this.#write().finally(() => {
        this.#writing = null;
      });
      return this.#writing;
    }
    // A write is running with older data: one more after it carries every change since.
    const queued = this.#writing.catch(() => undefined).then(() => {
      this.#queued = null;
      return this.persist();
    });
    this.#queued = queued;
    return queued;
  }

  async #write(): Promise<void> {
    const temporary = join(dirname(this.path), `.${Date.now()}.${Math.random().toString(36).slice(2)}.tmp`);
    try {
      const file = await open(temporary, "w", 0o600);
      try {
        await file.writeFile(JSON.stringify(this.snapshot));
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temporary, this.path);
    } catch (error) {
      throw new LocalStateError(`cannot write ${this.path}: ${(error as Error).message}`, { cause: error });
    }
  }

  override async close(): Promise<void> {
    await (this.#queued ?? this.#writing ?? Promise.resolve());
  }
}

function isSnapshot(value: unknown): value is StateSnapshot {
  if (typeof value !== "object" || value === null) return false;
  const record = value as Record<string, unknown>;
  return record.version === 1 && typeof record.cursors === "object" && typeof record.processed === "object";
}

/** Reads a `text/event-stream` answer with fetch. */
export function openFetchStream(target: StreamTarget, handlers: StreamHandlers, fetchImpl: typeof fetch = fetch): HintStream {
  const controller = new AbortController();
  let closed = false;
  const finish = (error: NetworkError | ProblemError | ProtocolError | null): void => {
    if (closed) return;
    closed = true;
    handlers.onClose(error);
  };
  void (async () => {
    let response: Response;
    try {
      response = await fetchImpl(target.url, {
        headers: { accept: "text/event-stream", ...target.headers },
        signal: controller.signal,
        credentials: target.withCredentials ? "include" : "omit",
        cache: "no-store",
      });
    } catch (error) {
      finish(controller.signal.aborted ? null : new NetworkError("the event stream could not be opened", { cause: error }));
      return;
    }
    if (!response.ok) {
      finish(await streamProblem(response));
      return;
    }
    if (response.body === null) {
      finish(new ProtocolError("the event stream has no body"));
      return;
    }
    handlers.onOpen();
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const reader = response.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        for (const event of parser.feed(decoder.decode(value, { stream: true }))) {
          if (closed) return;
          handlers.onEvent(event);
        }
      }
      finish(null);
    } catch (error) {
      finish(controller.signal.aborted ? null : new NetworkError("the event stream broke", { cause: error }));
    }
  })();
  return {
    close(): void {
      closed = true;
      controller.abort();
    },
  };
}

async function streamProblem(response: Response): Promise<ProblemError> {
  let document: ProblemDocument = {
    type: "about:blank",
    title: response.statusText,
    status: response.status,
    code: `http_${response.status}`,
    detail: `the event stream was refused with ${response.status}`,
  };
  try {
    const parsed = (await response.json()) as ProblemDocument;
    if (typeof parsed.code === "string") document = parsed;
  } catch {
    // Not a problem document.
  }
  return new ProblemError(document);
}

/** The platform for Node 20+: state files under `stateDirectory` (default `./.agent-inbox`). */
export function nodePlatform(options: { stateDirectory?: string; processedCapacity?: number } = {}): Platform {
  const directory = options.stateDirectory ?? ".agent-inbox";
  return {
    name: "node",
    streamAuth: "bearer",
    openState(name: string): Promise<LocalState> {
      const safe = name.replace(/[^A-Za-z0-9_.-]/g, "_");
      return JsonFileState.open(join(directory, `${safe}.json`), options.processedCapacity);
    },
    openStream: (target, handlers) => openFetchStream(target, handlers),
    tabs: null,
    watch(_listener: (change: LifecycleChange) => void): () => void {
      return () => undefined;
    },
  };
}
