// Type definitions for lockscope (clients/node), written by hand: the
// package has no build step. test/types.test.js checks them with tsc.

import { EventEmitter } from "node:events";
import type { Cluster, Redis } from "ioredis";

// node-redlock 5's types, declared here: its package.json gives TypeScript
// its declarations only under the old "node" resolution (no "types" in
// its "exports"), and lockscope's users import them from lockscope.

/** An ioredis client: a single node (or Sentinel) or a Cluster. */
export type Client = Redis | Cluster;

export type ClientExecutionResult =
  | { client: Client; vote: "for"; value: number }
  | { client: Client; vote: "against"; error: Error };

/** The votes of one attempt, once all are in. */
export type ExecutionStats = {
  readonly membershipSize: number;
  readonly quorumSize: number;
  readonly votesFor: Set<Client>;
  readonly votesAgainst: Map<Client, Error>;
};

export type ExecutionResult = {
  attempts: ReadonlyArray<Promise<ExecutionStats>>;
};

/** node-redlock's settings. */
export interface RedlockSettings {
  readonly driftFactor: number;
  readonly retryCount: number;
  readonly retryDelay: number;
  readonly retryJitter: number;
  readonly automaticExtensionThreshold: number;
}

/** node-redlock's settings, plus who the dashboard shows and where the events go. */
export interface Settings extends RedlockSettings {
  /** Who holds and waits, as the dashboard shows it. Default "<program>/<host>/<pid>". */
  readonly owner: string;
  /** Where the events go: an Emitter, or any Recorder. Default: one Emitter per first client, to lockscope:events on its server. */
  readonly emitter: Recorder;
}

/** node-redlock's: another lock holds one or more of the resources. */
export class ResourceLockedError extends Error {
  readonly message: string;
  constructor(message: string);
}

/** node-redlock's: an operation did not pass with a quorum (within its retries). */
export class ExecutionError extends Error {
  readonly message: string;
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
  constructor(message: string, attempts: ReadonlyArray<Promise<ExecutionStats>>);
}

/** node-redlock's Lock, with the hold's public lease id and owner. */
export class Lock {
  readonly redlock: Redlock;
  readonly resources: string[];
  readonly value: string;
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
  expiration: number;
  /** The public id of this hold, which its events carry and its stored value names ("" for a lock taken by node-redlock itself). */
  readonly lease: string;
  /** Who holds it, as the dashboard shows. */
  readonly owner: string;
  release(): Promise<ExecutionResult>;
  extend(duration: number): Promise<Lock>;
}

export type RedlockAbortSignal = AbortSignal & { error?: Error };

/**
 * node-redlock's Redlock, seen by lockscope: the same constructor, methods,
 * settings and errors, plus the settings owner and emitter. It emits
 * waiting (once per wait, with the holder seen and the leases held by the
 * enclosing using() routines), acquired, failed (reason held, timeout or
 * error), released, renewed (with its TTL and headroom), renew_failed and
 * lost; the value it stores names the owner and the lease.
 */
export default class Redlock extends EventEmitter {
  constructor(
    clients: Iterable<Client>,
    settings?: Partial<Settings>,
    scripts?: {
      readonly acquireScript?: string | ((script: string) => string);
      readonly extendScript?: string | ((script: string) => string);
      readonly releaseScript?: string | ((script: string) => string);
    },
  );
  readonly clients: Set<Client>;
  readonly settings: RedlockSettings;
  readonly scripts: {
    readonly acquireScript: { value: string; hash: string };
    readonly extendScript: { value: string; hash: string };
    readonly releaseScript: { value: string; hash: string };
  };
  /** Who this Redlock's locks are held by. */
  readonly owner: string;
  /** Where its events go. */
  readonly emitter: Recorder;
  /** Quits every client (and closes the emitter made for them, if any). */
  quit(): Promise<void>;
  acquire(resources: string[], duration: number, settings?: Partial<RedlockSettings>): Promise<Lock>;
  release(lock: Lock, settings?: Partial<RedlockSettings>): Promise<ExecutionResult>;
  extend(existing: Lock, duration: number, settings?: Partial<RedlockSettings>): Promise<Lock>;
  using<T>(resources: string[], duration: number, settings: Partial<RedlockSettings>, routine?: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  /** Names who holds resource now (its owner, or another library's name for it, never its value), or null when it is free. */
  holder(resource: string): Promise<string | null>;
}
export { Redlock };

/** A string field of an event: UTF-8 text, or bytes (a key is arbitrary bytes). */
export type Bytes = string | Buffer;

export type EventType =
  | "acquired"
  | "failed"
  | "released"
  | "renewed"
  | "renew_failed"
  | "lost"
  | "expired"
  | "forced"
  | "dropped"
  | "waiting";

/** One lock lifecycle step, in the wire's units (docs/events.md). */
export interface Event {
  type: EventType;
  key?: Bytes;
  owner?: Bytes;
  lease?: Bytes;
  /** Unix nanoseconds. */
  ts: bigint;
  /** Nanoseconds. */
  wait?: number | bigint;
  /** Nanoseconds. */
  hold?: number | bigint;
  /** Milliseconds. */
  ttl?: number;
  attempts?: number;
  fence?: number | bigint;
  reason?: Bytes;
  count?: number;
  holder?: Bytes;
  by?: Bytes;
  degraded?: boolean;
  passive?: boolean;
  /** 32 hex digits (or 16 bytes); empty: none. */
  traceId?: string | Buffer;
  /** 16 hex digits (or 8 bytes); empty: none. */
  spanId?: string | Buffer;
  /** Nanoseconds: the TTL left when a renewal landed. */
  headroom?: number | bigint;
}

/** What takes a lock's events, one at a time; it must not block (Emitter does not). */
export interface Recorder {
  record(event: Event): void;
}

/** Where an Emitter's batches go: the stream (StreamSink), or a sink of your own. */
export interface Sink {
  write(events: Event[]): Promise<void>;
}

export interface EmitterOptions {
  /** The stream key. Default "lockscope:events". */
  stream?: string;
  /** Spread events by lock key over this many streams; collectors must read as many (--partitions). */
  partitions?: number;
  /** Milliseconds of stream kept, by Redis's clock (XADD MINID ~; docs/events.md, "Retention rule"). Default 15 minutes. */
  maxAge?: number;
  /** If positive, trim with MAXLEN ~ maxLen entries instead; negative: never trim. */
  maxLen?: number;
  /** Most events per write (2048), capped at bufferSize and 9 999. */
  batchSize?: number;
  /** The longest an event waits, in ms (100, the most). */
  flushInterval?: number;
  /** Events held in memory, buffered or being written (16 384). */
  bufferSize?: number;
  /** Bound of one write, in ms (1000). */
  writeTimeout?: number;
  /** Identity of the emitter's own dropped reports. Default "<program>/<host>/<pid>". */
  owner?: string;
  /** Receives the batches instead of the stream (MemorySink for tests). */
  sink?: Sink;
}

export interface EmitterStats {
  recorded: number;
  sent: number;
  dropped: number;
  /** Successful writes (stream entries). */
  batches: number;
  errors: number;
}

/**
 * Batches lock events and writes them in the background as packed XADDs,
 * the Go emitter's wire format. record() never blocks; when Redis is away
 * events are dropped, counted and reported in a dropped event.
 */
export class Emitter implements Recorder {
  constructor(client: Client | null, options?: EmitterOptions);
  readonly owner: string;
  record(event: Event): void;
  /** Writes every event recorded before the call; rejects with the write's error or on timeout (ms). */
  flush(timeout?: number): Promise<void>;
  /** Flushes and stops, within timeout ms (5000). Idempotent. */
  close(timeout?: number): Promise<void>;
  stats(): EmitterStats;
}

/** Keeps every event written to it, for tests. */
export class MemorySink implements Sink {
  events: Event[];
  writes: number;
  write(events: Event[]): Promise<void>;
}

/** Writes batches to the lockscope stream (or its partitions). */
export class StreamSink implements Sink {
  constructor(
    client: Client,
    options?: { stream?: string; maxLen?: number; partitions?: number; maxAge?: number; writeTimeout?: number },
  );
  write(events: Event[]): Promise<void>;
}

/** A decoded event: every field present, strings that are not UTF-8 as Buffers. */
export interface DecodedEvent extends Required<Omit<Event, "traceId" | "spanId">> {
  traceId: string;
  spanId: string;
}

/** The wire format (docs/events.md): the twin of Go's event package. */
export namespace event {
  const VERSION: 1;
  const DEFAULT_STREAM: "lockscope:events";
  const MAX_BATCH_EVENTS: number;
  const MAX_STRING_LEN: number;
  const MAX_BATCH_BYTES: number;
  const ENTRY_BYTES: number;
  const TYPES: Readonly<Record<EventType, number>>;
  class DecodeError extends Error {}
  /** The packed batch of events, as Go's event.Pack. */
  function pack(events: Event[]): Buffer;
  /** The extension of a batch (empty when no event has optional fields). */
  function packExt(events: Event[]): Buffer;
  function packEntries(events: Event[], maxBytes?: number): { n: number; batch: Buffer; ext: Buffer }[];
  function packedFields(n: number, batch: Buffer, ext?: Buffer): (string | Buffer)[];
  /** The fields of a single-event entry, for one XADD. */
  function fields(e: Event): (string | Buffer)[];
  /** Decodes one stream entry (an object, a Map, or ioredis's flat list); throws DecodeError. */
  function decode(entry: Record<string, string | Buffer> | Map<string | Buffer, string | Buffer> | (string | Buffer)[]): DecodedEvent[];
  function heldLeases(e: Event): string[];
  function partitionOf(key: Bytes, n: number): number;
  function slot(key: Bytes): number;
  function streams(base?: string, n?: number): string[];
}

/** Lock values (ls1|<secret>|<lease>|<fence>|<since ms>|<owner>), shared with the Go and Python libraries. */
export namespace value {
  interface Value {
    token: string;
    lease: string;
    fence: number;
    sinceMs: number;
    owner: string | Buffer;
  }
  function parse(v: string | Buffer | null): Value | null;
  function make(secret: string, lease: string, sinceMs: number, owner: string, fence?: number): string;
  function newLease(): { secret: string; lease: string };
  function fingerprint(v: string | Buffer): string;
  function foreignKind(v: string | Buffer): string;
  function holderName(v: string | Buffer | null): string;
  function defaultOwner(): string;
}
