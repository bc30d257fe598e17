/** A coalescing wake-up between loops: notifications while nobody waits leave one permit. */
export class Wakeup {
  #permit = false;
  #pending: Promise<void> | null = null;
  #resolve: (() => void) | null = null;

  notify(): void {
    if (this.#resolve !== null) {
      const resolve = this.#resolve;
      this.#resolve = null;
      this.#pending = null;
      resolve();
    } else {
      this.#permit = true;
    }
  }

  /** Resolves at the next notification (at once if one is pending). Waiters share one promise. */
  wait(): Promise<void> {
    if (this.#permit) {
      this.#permit = false;
      return Promise.resolve();
    }
    this.#pending ??= new Promise<void>((resolve) => {
      this.#resolve = resolve;
    });
    return this.#pending;
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
