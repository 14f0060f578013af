/**
 * {@link PresignedUrl}: a time-limited GET capability that does not leak by accident.
 *
 * A presigned URL is a bearer credential until it expires. The object holding it prints as
 * `[redacted]` through every ordinary route — `String(x)`, template strings, `JSON.stringify`,
 * `console.log`/`util.inspect` — and exposes the URL only through an explicit {@link
 * PresignedUrl.reveal} call, so it cannot end up in a log line or a stored row unnoticed. The URL
 * is held in a private field, invisible to property enumeration.
 *
 * @module
 */
import { inspect } from 'node:util';

const REDACTED = '[redacted]';

/** A presigned GET URL, redacted unless {@link reveal} is called. */
export class PresignedUrl {
  readonly #url: string;
  /** The location (stable identity) this URL reads. */
  readonly uri: string;
  /** When the URL stops working. */
  readonly expiresAt: Date;

  constructor(url: string, uri: string, expiresAt: Date) {
    this.#url = url;
    this.uri = uri;
    this.expiresAt = expiresAt;
  }

  /**
   * The URL itself: usable with a plain HTTP GET (and an optional `Range` header) until
   * {@link expiresAt}. No other header is required. Treat it as a secret.
   */
  reveal(): string {
    return this.#url;
  }

  /** `[redacted]`. */
  toString(): string {
    return REDACTED;
  }

  /** `[redacted]`, so the URL never reaches stored JSON. */
  toJSON(): string {
    return REDACTED;
  }

  /** What console.log and util.inspect show. */
  [inspect.custom](): string {
    return `PresignedUrl ${REDACTED} { uri: ${this.uri}, expiresAt: ${this.expiresAt.toISOString()} }`;
  }

  /** Template strings and string concatenation. */
  [Symbol.toPrimitive](): string {
    return REDACTED;
  }
}
