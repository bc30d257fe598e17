/**
 * The `text/event-stream` wire format for clients without `EventSource` (Node, or any stream
 * that needs an `Authorization` header): an incremental parser fed text as it arrives.
 */

export interface SseEvent {
  /** `event:`; `message` when absent. */
  event: string;
  data: string;
  /** The last `id:` seen on the stream so far. */
  id: string | null;
}

/** Longest line accepted; a stream sending longer lines is broken or hostile. */
export const LINE_CHARS_MAX = 64 * 1024;

export class SseParser {
  #buffer = "";
  #afterCr = false;
  #event = "";
  #data: string[] = [];
  #lastId: string | null = null;
  #pending = false;

  /** Feeds decoded text; returns the events it completes. */
  feed(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const char = text[i];
      if (this.#afterCr) {
        this.#afterCr = false;
        if (char === "\n") {
          start = i + 1;
          continue;
        }
      }
      if (char === "\n" || char === "\r") {
        this.#afterCr = char === "\r";
        const line = this.#buffer + text.slice(start, i);
        this.#buffer = "";
        start = i + 1;
        const event = this.#line(line);
        if (event !== null) events.push(event);
      }
    }
    this.#buffer += text.slice(start);
    if (this.#buffer.length > LINE_CHARS_MAX) {
      throw new RangeError(`the event stream sent a line longer than ${LINE_CHARS_MAX} characters`);
    }
    return events;
  }

  #line(line: string): SseEvent | null {
    if (line === "") return this.#dispatch();
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.#event = value;
        this.#pending = true;
        break;
      case "data":
        this.#data.push(value);
        this.#pending = true;
        break;
      case "id":
        if (!value.includes("\0")) this.#lastId = value;
        break;
      default:
        break;
    }
    return null;
  }

  #dispatch(): SseEvent | null {
    if (!this.#pending) return null;
    const event: SseEvent = { event: this.#event || "message", data: this.#data.join("\n"), id: this.#lastId };
    this.#event = "";
    this.#data = [];
    this.#pending = false;
    return event;
  }
}
