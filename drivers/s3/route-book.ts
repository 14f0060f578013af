/**
 * Which route a lean request takes ({@link RouteBook}): a fixed path-style route, else one
 * learned from the SDK's own endpoint resolution in this process, else a route stored by an
 * earlier process (route-store.ts), which stays a hint until a request on it succeeds. See
 * lean-path.ts for how the lean path uses it.
 *
 * @module
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { Route } from './route.js';
import type { RouteHints } from './route-store.js';

/**
 * The commands whose resolved endpoint a lean request reuses, by kind: object requests (a
 * single-file fetch learns the route from its HEAD) and listings.
 */
const ROUTE_KIND: Record<string, 'object' | 'bucket'> = {
  GetObjectCommand: 'object',
  HeadObjectCommand: 'object',
  ListObjectsV2Command: 'bucket',
  ListObjectVersionsCommand: 'bucket',
};

/** The parts of the SDK's resolved endpoint (`context.endpointV2`) the lean path reads. */
interface ResolvedEndpoint {
  url?: URL | undefined;
  properties?: { authSchemes?: unknown } | undefined;
}

/** A route to send one request on; `hint` when it is a stored route not yet confirmed. */
export interface Picked {
  id: string;
  route: Route;
  hint: boolean;
}

/** What a {@link RouteBook} is built from. */
export interface RouteBookOptions {
  /** The route of a bucket known without asking the SDK ({@link pathStyleRoute}), if any. */
  fixedRoute?: ((bucket: string) => Route | undefined) | undefined;
  /**
   * Routes learned by earlier processes (route-store.ts), read on the first request that has
   * no route; learned routes are saved to it. Only for routes that are not fixed.
   */
  stored?: RouteHints | undefined;
  debug(message: string): void;
}

/** The routes of one store's lean requests, by kind and bucket. See the module comment. */
export class RouteBook {
  /** Fixed or learned in this process (or confirmed stored ones); `null`: the SDK's only. */
  private readonly routes = new Map<string, Route | null>();
  /** Stored routes not yet confirmed or refuted in this process. */
  private readonly hints = new Map<string, Route>();
  private hintsLoaded: Promise<void> | undefined;

  constructor(private readonly options: RouteBookOptions) {}

  private debug(message: string): void {
    this.options.debug(message);
  }

  /**
   * Learn routes from `client`'s own endpoint resolution: a middleware records, per bucket, the
   * endpoint and auth scheme of its first GetObject/HeadObject and ListObjectsV2.
   */
  watch(client: S3Client): void {
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const bucket = (args.input as { Bucket?: unknown }).Bucket;
        const kind = ROUTE_KIND[context.commandName ?? ''];
        if (kind && typeof bucket === 'string') {
          this.learn(kind, bucket, (context as { endpointV2?: ResolvedEndpoint }).endpointV2);
        }
        return next(args);
      },
      { step: 'build', name: 'provcatLeanRoute', override: true },
    );
  }

  /**
   * The route of a kind of request to a bucket: the fixed one, else a learned (or confirmed)
   * one, else a stored hint (the stored routes are read on the first such request).
   */
  async pick(kind: 'object' | 'bucket', bucket: string): Promise<Picked | undefined> {
    const id = `${kind}:${bucket}`;
    const fixed = this.options.fixedRoute?.(bucket);
    if (fixed) return { id, route: fixed, hint: false };
    const known = this.routes.get(id);
    if (known !== undefined || this.routes.has(id)) {
      return known ? { id, route: known, hint: false } : undefined;
    }
    const stored = this.options.stored;
    if (!stored) return undefined;
    this.hintsLoaded ??= stored.load().then(
      (routes) => {
        for (const [k, route] of routes) if (!this.routes.has(k)) this.hints.set(k, route);
      },
      (error: unknown) => this.debug(`lean path: stored routes not read: ${String(error)}`),
    );
    await this.hintsLoaded;
    // The SDK may have learned the route meanwhile: that wins.
    const learned = this.routes.get(id);
    if (learned !== undefined || this.routes.has(id)) {
      return learned ? { id, route: learned, hint: false } : undefined;
    }
    const hint = this.hints.get(id);
    return hint && { id, route: hint, hint: true };
  }

  /** True while `picked` is a stored route that no request has confirmed in this process. */
  unconfirmed(picked: Picked): boolean {
    return picked.hint && this.routes.get(picked.id) !== picked.route;
  }

  /**
   * Settle a stored route by the outcome of a request on it: a good answer confirms it (it is
   * used as a learned route from now on); a failure drops it here and on disk, so the SDK
   * answers (and its resolution is learned and stored). An abort says nothing about the route.
   */
  settle(picked: Picked, ok: boolean, signal: AbortSignal | undefined): void {
    if (!picked.hint || signal?.aborted) return;
    const { id, route } = picked;
    if (this.hints.get(id) !== route) return; // settled by another request already
    this.hints.delete(id);
    if (this.routes.has(id)) return; // the SDK learned it meanwhile
    if (ok) {
      this.routes.set(id, route);
      this.debug(`lean path: stored route of ${id} confirmed (${route.url.href})`);
    } else {
      this.debug(`lean path: stored route of ${id} failed (${route.url.href}); dropped`);
      this.options.stored?.drop(id);
    }
  }

  /** Record the SDK's endpoint for a kind of request to a bucket (once); `null` if unusable. */
  private learn(kind: string, bucket: string, endpoint: ResolvedEndpoint | undefined): void {
    const id = `${kind}:${bucket}`;
    if (this.routes.has(id)) return;
    const scheme = (
      endpoint?.properties?.authSchemes as Record<string, unknown>[] | undefined
    )?.[0];
    const url = endpoint?.url;
    const ok =
      url !== undefined &&
      (url.protocol === 'http:' || url.protocol === 'https:') &&
      url.search === '' &&
      scheme?.name === 'sigv4' &&
      typeof scheme.signingRegion === 'string' &&
      typeof scheme.signingName === 'string';
    // What the SDK resolves replaces a stored hint, confirmed or not.
    this.hints.delete(id);
    if (!ok) {
      this.routes.set(id, null);
      this.debug(`lean path: ${kind} requests to ${bucket} stay on the SDK (endpoint or auth)`);
      this.options.stored?.drop(id);
      return;
    }
    const route: Route = {
      url,
      signingRegion: scheme.signingRegion as string,
      signingName: scheme.signingName as string,
    };
    this.routes.set(id, route);
    this.debug(`lean path: ${kind} requests to ${bucket} via ${url.origin}${url.pathname}`);
    this.options.stored?.save(id, route);
  }
}
