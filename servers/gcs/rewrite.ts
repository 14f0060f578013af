/**
 * objects.rewrite and objects.copy (cloud.google.com/storage/docs/json_api/v1/objects/rewrite).
 *
 * `POST /b/S/o/N/rewriteTo/b/D/o/M?sourceGeneration=G[&rewriteToken=T][&maxBytesRewrittenPerCall=K]`
 * answers `{kind:"storage#rewriteResponse", totalBytesRewritten, objectSize, done, resource}`
 * when done, or `{..., done:false, rewriteToken}` when the client must call again with the
 * token. GCS decides how much one call does; here every call does at most
 * `maxBytesRewrittenPerCall` (which GCS requires to be a multiple of 1 MiB) and at most the
 * server's `rewriteBytesPerCall` knob, and otherwise everything in one call. The knob is what
 * makes a test exercise a client's token loop.
 *
 * The source generation is fixed at the first call (its bytes are immutable, so later calls
 * copy exactly that generation). Destination preconditions (`ifGenerationMatch=0` ...) are
 * checked on every call with the parameters of that call, and once more, atomically with the
 * write, with those of the first call — the SDK sends them on the first call only, and GCS ties
 * a token to the request that started it. Source preconditions are `ifSourceGenerationMatch`
 * and friends, checked on the first call.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { invalid } from './api-error.js';
import { jsonBody, type RequestContext, writableMetadata } from './json-api.js';
import { json, type Reply } from './reply.js';
import { objectResource } from './resources.js';
import {
  type ObjectVersion,
  type Preconditions,
  parsePreconditions,
  requirePreconditions,
  type WritableMetadata,
} from './store.js';

const MiB = 1024 * 1024;

interface RewriteState {
  readonly source: ObjectVersion;
  readonly destBucket: string;
  readonly destName: string;
  readonly meta: WritableMetadata;
  readonly preconditions: Preconditions;
  done: number;
}

/** The rewrites in progress of one server, by token. */
export class Rewrites {
  private readonly pending = new Map<string, RewriteState>();

  /** How many rewrites wait for another call (tokens handed out and not finished). */
  get inProgress(): number {
    return this.pending.size;
  }

  /**
   * One rewrite call. `perCall` is the server's knob (undefined: no server limit).
   * `copy` answers the object resource (objects.copy) and always finishes in one call.
   */
  call(
    ctx: RequestContext,
    src: { bucket: string; name: string },
    dest: { bucket: string; name: string },
    perCall: number | undefined,
    copy: boolean,
  ): Reply {
    const store = ctx.store;
    const preconditions = parsePreconditions(ctx.query);
    const token = ctx.query.get('rewriteToken');
    let state: RewriteState;
    if (token !== null && token !== '' && !copy) {
      const found = this.pending.get(token);
      if (
        found === undefined ||
        found.source.bucket !== src.bucket ||
        found.source.name !== src.name ||
        found.destBucket !== dest.bucket ||
        found.destName !== dest.name
      ) {
        throw invalid('Invalid rewrite token.');
      }
      state = found;
    } else {
      const source = store.select(src.bucket, src.name, ctx.query.get('sourceGeneration'));
      requirePreconditions(source, parsePreconditions(ctx.query, true));
      store.bucket(dest.bucket);
      const body = jsonBody(ctx);
      const given = writableMetadata(body);
      const meta: WritableMetadata =
        Object.keys(given).length > 0
          ? given
          : {
              contentType: source.contentType,
              contentEncoding: source.contentEncoding,
              contentDisposition: source.contentDisposition,
              contentLanguage: source.contentLanguage,
              cacheControl: source.cacheControl,
              ...(source.metadata === undefined ? {} : { metadata: { ...source.metadata } }),
            };
      state = {
        source,
        destBucket: dest.bucket,
        destName: dest.name,
        meta,
        preconditions,
        done: 0,
      };
    }
    requirePreconditions(store.live(store.bucket(dest.bucket), dest.name), preconditions);

    const size = state.source.content.size;
    let budget = Number.POSITIVE_INFINITY;
    const asked = ctx.query.get('maxBytesRewrittenPerCall');
    if (asked !== null && asked !== '' && !copy) {
      if (!/^\d+$/.test(asked) || Number(asked) % MiB !== 0 || Number(asked) === 0) {
        throw invalid('maxBytesRewrittenPerCall must be a positive multiple of 1048576.');
      }
      budget = Number(asked);
    }
    if (perCall !== undefined && !copy) budget = Math.min(budget, perCall);
    state.done = Math.min(size, state.done + budget);

    if (state.done < size) {
      let id = token;
      if (id === null || id === '' || !this.pending.has(id)) {
        id = randomBytes(32).toString('base64url');
        this.pending.set(id, state);
      }
      return json(200, {
        kind: 'storage#rewriteResponse',
        totalBytesRewritten: String(state.done),
        objectSize: String(size),
        done: false,
        rewriteToken: id,
      });
    }
    if (token !== null) this.pending.delete(token);
    const version = store.insert(
      state.destBucket,
      state.destName,
      state.source.content,
      state.meta,
      { ...state.preconditions, ...preconditions },
      state.source.componentCount,
    );
    const resource = objectResource(version, ctx.base);
    if (copy) return json(200, resource);
    return json(200, {
      kind: 'storage#rewriteResponse',
      totalBytesRewritten: String(size),
      objectSize: String(size),
      done: true,
      resource,
    });
  }
}
