/**
 * What a driver asks about a bucket once and then knows — whether it keeps versions, how it
 * honours "create only if absent" — and the one rule for the version primitives on a bucket
 * that keeps none.
 *
 * {@link BucketMemo} keeps one promise per bucket, so concurrent callers share one request. It
 * keeps an answer for the store's lifetime, except a failure (the next call asks again) and an
 * answer the driver marks as passing (`'missing'`: a bucket that may be created later), and
 * `makeBucket` forgets what it changed.
 *
 * @module
 */
import { NotFound, NotSupported } from '../core/errors.js';

/** Per-bucket answers, asked once (see the module comment). */
export class BucketMemo<T> {
  private readonly answers = new Map<string, Promise<T>>();

  /**
   * @param ask Asks the store about one bucket.
   * @param keep Whether an answer is kept (default: every one).
   */
  constructor(
    private readonly ask: (bucket: string) => Promise<T>,
    private readonly keep: (answer: T) => boolean = () => true,
  ) {}

  /** The answer for `bucket`: the kept one, the one being asked, or a new ask. */
  get(bucket: string): Promise<T> {
    let answer = this.answers.get(bucket);
    if (!answer) {
      answer = this.ask(bucket);
      this.answers.set(bucket, answer);
      const forget = () => {
        if (this.answers.get(bucket) === answer) this.answers.delete(bucket);
      };
      answer.then((a) => this.keep(a) || forget(), forget);
    }
    return answer;
  }

  /** Ask again next time (the bucket was just created or changed). */
  forget(bucket: string): void {
    this.answers.delete(bucket);
  }
}

/**
 * A bucket's versioning as the version primitives need it: `'enabled'`, `'missing'` (no such
 * bucket), or the store's word for why it keeps none (`'off'`, `'suspended'`, ...).
 */
export type Versioning = 'enabled' | 'missing' | (string & {});

/**
 * Each bucket's versioning, asked once with `ask`: a {@link NotFound} from it is `'missing'`,
 * which is not kept (the bucket may be created), nor is a failure.
 */
export function versioningMemo(
  ask: (bucket: string) => Promise<Versioning>,
): BucketMemo<Versioning> {
  return new BucketMemo(
    (bucket) =>
      ask(bucket).catch((error: unknown) => {
        if (error instanceof NotFound) return 'missing';
        throw error;
      }),
    (state) => state !== 'missing',
  );
}

/**
 * Refuse a version primitive unless versioning is `'enabled'`: {@link NotFound} for a missing
 * bucket, else {@link NotSupported} (CLI exit 11, as on every driver) — without versions a pin
 * could not survive an overwrite, so nothing pretends to have one. `uri` is what the call was
 * about (the object, at its version when there is one), for the message.
 */
export function requireVersioning(state: Versioning, op: string, uri: string): void {
  if (state === 'enabled') return;
  if (state === 'missing') throw new NotFound(`${op} ${uri}: no such bucket`, { uri });
  throw new NotSupported(
    `${op} ${uri}: the bucket keeps no versions (versioning is ${state}); pins, commits and ` +
      'branches need a bucket with versioning (provcat mb URI --versioning)',
    { uri },
  );
}

/**
 * The `NotFound` a listing primitive raises for a bucket that does not exist (from the
 * listing's own answer: no request is added to find out), naming it: `uri` is the bucket's.
 */
export function missingBucket(uri: string, cause?: unknown): NotFound {
  return new NotFound(`no such bucket: ${uri}`, { uri, cause });
}
