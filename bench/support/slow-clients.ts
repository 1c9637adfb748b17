/**
 * The attackers of issue 14 item 1, as a load generator runs them next to real traffic (the
 * soak group): clients that hold a connection by sending almost nothing. Each slot keeps one
 * connection open, dribbling its request; when castor cuts it, the slot opens the next one, so
 * the pressure lasts the whole run. Being cut is the expected outcome: what is recorded is how
 * each connection ended (the status castor answered, if any) and how long it was held.
 *
 * - slow headers: a request line, then one header line every few seconds, never the blank
 *   line that ends the headers (castor's CASTOR_HEADER_TIMEOUT answers 408 and closes);
 * - slow bodies: the headers of an authenticated xorb upload whose body starts like a real
 *   xorb (so castor stages it) and then trickles far below CASTOR_BODY_MIN_RATE (castor cuts
 *   it with 408 once a CASTOR_BODY_TIMEOUT window averaged too little).
 */
import type { Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { openSocket } from "../../test/helpers/raw-socket.js";

/** What one kind of attacker saw over a run. */
export interface SlowClientReport {
  /** Connections opened (a slot reconnects after each cut). */
  opened: number;
  /** Connections castor closed. */
  cut: number;
  /** How the cut connections ended: `408`, another status, or `no answer`. */
  endings: ReadonlyMap<string, number>;
  /** Seconds from connect to close, per cut connection. */
  heldSeconds: readonly number[];
  /** Connections still open when the attacker stopped, and the age of the oldest, in seconds. */
  openAtStop: number;
  oldestAtStopSeconds: number;
}

export interface SlowClientOptions {
  port: number;
  /** Concurrent connections. */
  slots: number;
  /** Bytes written once connected: the request line and headers (and a first piece of body). */
  opening: () => Uint8Array | string;
  /** The n-th later piece, written every `everyMs`. */
  drip: (n: number) => Uint8Array | string;
  everyMs: number;
}

/** Pause before a slot reconnects, so a server that closes at once does not make a busy loop. */
const RECONNECT_DELAY_MS = 100;
const STATUS_LINE = /^HTTP\/1\.[01] (\d{3})/;

/** One kind of slow client, `slots` connections at a time, from `start()` until `stop()`. */
export class SlowClients {
  private opened = 0;
  private readonly endings = new Map<string, number>();
  private readonly heldSeconds: number[] = [];
  private readonly live = new Map<Socket, number>();
  private stopping = false;
  private slots: Promise<void>[] = [];

  constructor(private readonly options: SlowClientOptions) {}

  start(): void {
    this.slots = Array.from({ length: this.options.slots }, async () => {
      while (!this.stopping) {
        await this.holdOne();
        if (!this.stopping) await sleep(RECONNECT_DELAY_MS);
      }
    });
  }

  /** Closes the connections still open (they were not cut: not counted as such) and reports. */
  async stop(): Promise<SlowClientReport> {
    this.stopping = true;
    const now = performance.now();
    const ages = [...this.live.values()].map((opened) => (now - opened) / 1000);
    for (const socket of this.live.keys()) socket.destroy();
    await Promise.all(this.slots);
    return {
      opened: this.opened,
      cut: this.heldSeconds.length,
      endings: this.endings,
      heldSeconds: this.heldSeconds,
      openAtStop: ages.length,
      oldestAtStopSeconds: ages.length === 0 ? 0 : Math.max(...ages),
    };
  }

  /** A snapshot for progress lines: connections opened and cut so far. */
  counts(): { opened: number; cut: number } {
    return { opened: this.opened, cut: this.heldSeconds.length };
  }

  /** One connection, from connect until castor closes it (or `stop`). */
  private async holdOne(): Promise<void> {
    let socket: Socket;
    try {
      socket = await openSocket(this.options.port);
    } catch (error) {
      this.count(`connect failed: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
      return;
    }
    // `stop` may have closed the others while this one was connecting.
    if (this.stopping) {
      socket.destroy();
      return;
    }
    this.opened++;
    const opened = performance.now();
    this.live.set(socket, opened);
    let head = "";
    socket.on("data", (piece: Buffer) => {
      if (head.length < 64) head += piece.toString("latin1", 0, 64);
    });
    // Writes after castor closed fail with EPIPE or ECONNRESET; the close that follows is what counts.
    socket.on("error", () => undefined);
    let n = 0;
    const timer = setInterval(() => {
      if (!socket.destroyed) socket.write(this.options.drip(n++));
    }, this.options.everyMs);
    socket.write(this.options.opening());
    await new Promise<void>((resolve) => socket.once("close", () => resolve()));
    clearInterval(timer);
    this.live.delete(socket);
    if (this.stopping) return;
    this.heldSeconds.push((performance.now() - opened) / 1000);
    this.count(STATUS_LINE.exec(head)?.[1] ?? "no answer");
  }

  private count(ending: string): void {
    this.endings.set(ending, (this.endings.get(ending) ?? 0) + 1);
  }
}
