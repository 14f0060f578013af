/**
 * The conformance suite's fault injector: {@link Interposer}, a store that delegates every
 * primitive to the driver under test, counting calls and running hooks around them.
 *
 * @module
 */
import type {
  Capabilities,
  GetOptions,
  GetResult,
  HistoryOptions,
  ListPage,
  ObjectInfo,
  PagesOptions,
  PutOptions,
  PutSource,
  SignalOptions,
  VersionRecord,
} from '../contract/primitives.js';
import type { Uri } from '../core/uri.js';
import { type Location, ObjectStore } from '../store/object-store.js';

/** Hooks of an {@link Interposer}. */
export interface InterposerHooks {
  /** Called before every primitive call, with its name and arguments; may throw or wait. */
  before?: ((name: string, args: readonly unknown[]) => void | Promise<void>) | undefined;
  /** Called after a `_history` listing was read to its end. */
  afterHistory?: ((bucket: string, prefix: string) => void | Promise<void>) | undefined;
}

/**
 * A store that delegates every primitive to `inner` (sharing its cache and offline mode),
 * counting calls and running hooks around them: the conformance suite's fault injector.
 */
export class Interposer extends ObjectStore {
  readonly scheme: string;
  readonly driver: string;
  readonly capabilities: Capabilities;
  /** Calls per primitive name. */
  readonly calls: Record<string, number> = {};

  constructor(
    readonly inner: ObjectStore,
    readonly hooks: InterposerHooks = {},
  ) {
    super({ cache: inner.cache, offline: inner.offline, concurrency: inner.concurrency });
    this.scheme = inner.scheme;
    this.driver = `${inner.driver}+interposer`;
    this.capabilities = inner.capabilities;
  }

  private async enter(name: string, args: readonly unknown[]): Promise<void> {
    this.calls[name] = (this.calls[name] ?? 0) + 1;
    await this.hooks.before?.(name, args);
  }

  override locate(uri: Uri): Location {
    return this.inner.locate(uri);
  }
  async _head(bucket: string, key: string, options?: SignalOptions): Promise<ObjectInfo> {
    await this.enter('_head', [bucket, key]);
    return this.inner._head(bucket, key, options);
  }
  async *_pages(bucket: string, prefix: string, options?: PagesOptions): AsyncIterable<ListPage> {
    await this.enter('_pages', [bucket, prefix]);
    yield* this.inner._pages(bucket, prefix, options);
  }
  async _get(bucket: string, key: string, options?: GetOptions): Promise<GetResult> {
    await this.enter('_get', [bucket, key]);
    return this.inner._get(bucket, key, options);
  }
  async _put(
    bucket: string,
    key: string,
    source: PutSource,
    options?: PutOptions,
  ): Promise<ObjectInfo> {
    await this.enter('_put', [bucket, key]);
    return this.inner._put(bucket, key, source, options);
  }
  async _delete(bucket: string, key: string, options?: SignalOptions): Promise<void> {
    await this.enter('_delete', [bucket, key]);
    return this.inner._delete(bucket, key, options);
  }
  override async _versionOf(bucket: string, key: string, options?: SignalOptions) {
    await this.enter('_versionOf', [bucket, key]);
    return this.inner._versionOf(bucket, key, options);
  }
  override async *_history(
    bucket: string,
    prefix: string,
    options?: HistoryOptions,
  ): AsyncIterable<VersionRecord> {
    await this.enter('_history', [bucket, prefix]);
    yield* this.inner._history(bucket, prefix, options);
    await this.hooks.afterHistory?.(bucket, prefix);
  }
  override async _headVersion(
    bucket: string,
    key: string,
    versionId: string,
    options?: SignalOptions,
  ) {
    await this.enter('_headVersion', [bucket, key, versionId]);
    return this.inner._headVersion(bucket, key, versionId, options);
  }
  override async _getVersion(bucket: string, key: string, versionId: string, options?: GetOptions) {
    await this.enter('_getVersion', [bucket, key, versionId]);
    return this.inner._getVersion(bucket, key, versionId, options);
  }
  override async _create(bucket: string, key: string, body: Uint8Array, options?: SignalOptions) {
    await this.enter('_create', [bucket, key]);
    return this.inner._create(bucket, key, body, options);
  }
  override async _copy(
    bucket: string,
    key: string,
    versionId: string | undefined,
    toKey: string,
    options?: SignalOptions,
  ) {
    await this.enter('_copy', [bucket, key, versionId, toKey]);
    return this.inner._copy(bucket, key, versionId, toKey, options);
  }
  override async _createMode(bucket: string) {
    return this.inner._createMode(bucket);
  }
}
