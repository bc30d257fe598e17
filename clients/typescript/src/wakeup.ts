/**
 * A coalescing wake-up between loops: a notification while nobody waits leaves one permit.
 * Waits can be cancelled, so a loop that waits on it again and again holds no stale waiters.
 */
export class Wakeup {
  #permit = false;
  readonly #waiters = new Set<() => void>();

  notify(): void {
    if (this.#waiters.size === 0) {
      this.#permit = true;
      return;
    }
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }

  /** Resolves at the next notification (at once if a permit is pending); `cancel` stops waiting. */
  next(): { promise: Promise<void>; cancel(): void } {
    if (this.#permit) {
      this.#permit = false;
      return { promise: Promise.resolve(), cancel: () => undefined };
    }
    let wake: () => void = () => undefined;
    const promise = new Promise<void>((resolve) => {
      wake = resolve;
    });
    this.#waiters.add(wake);
    return { promise, cancel: () => void this.#waiters.delete(wake) };
  }
}

/** A timer as a promise that can be cancelled (so loops do not pile up timers). */
export function timer(ms: number): { promise: Promise<void>; cancel(): void } {
  let handle: ReturnType<typeof setTimeout> | undefined;
  const promise = new Promise<void>((resolve) => {
    handle = setTimeout(resolve, Math.max(0, ms));
  });
  return { promise, cancel: () => clearTimeout(handle) };
}
