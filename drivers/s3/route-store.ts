/**
 * Routes of the lean path (lean-path.ts, route-book.ts) kept between processes, in the cache.
 *
 * Why: away from an explicit path-style endpoint, the lean path learns where a bucket's requests
 * go from the SDK's own endpoint resolution of its first request. A CLI command is one process,
 * so every command paid for loading the SDK client (~0.25 s of CPU) for its first request per
 * bucket. Keeping what was learned lets later processes go lean from their first request.
 *
 * Design choices:
 * - Where: `<cache root>/v1/s3-routes/<fingerprint>.json`, beside (never inside) the view and
 *   blob trees, written with {@link writeFileAtomic} (complete or absent, never half a file).
 * - Keyed by a fingerprint ({@link routeFingerprint}) of everything that decides the SDK's
 *   endpoint: the resolved region, the explicit endpoint (or none), path style, whether
 *   configured endpoints are ignored, the environment variables the SDK reads for endpoints
 *   and auth schemes ({@link ENDPOINT_ENV}), the shared config and credentials files (path,
 *   mtime, size: the SDK merges a profile from both) and the SDK's version (its endpoint
 *   ruleset). Any change gives another file, so a route is never reused under inputs that may
 *   resolve differently. When in doubt an input is included: a missed one would mean a route
 *   the SDK would not choose; an extra one only costs a relearn.
 * - Entries: per `kind:bucket` the route and when the SDK resolved it. Entries older than
 *   {@link ROUTE_MAX_AGE_MS} (or dated in the future) are ignored, so the SDK re-resolves every
 *   route at least daily. `null` routes (not usable lean) are not kept: the SDK is asked anyway.
 * - A stored route is a hint, not a fact: the lean path confirms it by a first good answer and
 *   drops it (here too) on the first failure; see route-book.ts.
 * - Best effort: reading or writing never fails a user's call. A missing file is no routes; a
 *   corrupt or unreadable one is ignored (logged); a failed write is logged. Writes merge with
 *   what is on disk at the time (another process may have learned other buckets) and run one at
 *   a time per store; two processes writing at once may lose one's entry, which costs that
 *   process's successor one SDK resolution, nothing more.
 * - Trust: the file is as trusted as the cache it lives in (which already holds the bytes a
 *   fetch returns); a route only says where to send a request signed for that host.
 *
 * @module
 */
import { readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import path from 'node:path';
import { sha256Hex } from '../../src/core/digest.js';
import { writeFileAtomic } from '../../src/core/fs-atomic.js';
import type { Route } from './route.js';

/** Stored routes older than this (24 hours) are ignored. */
export const ROUTE_MAX_AGE_MS = 24 * 60 * 60 * 1000;

/** The version of the route file's format (part of every fingerprint). */
const FORMAT = 1;

/**
 * The environment variables the SDK reads (from `process.env`, whatever `env` the store was
 * given) that can change a resolved S3 endpoint or its auth scheme. Checked against
 * `@aws-sdk/client-s3`'s runtimeConfig and endpoint parameters: FIPS, dual-stack, ARN region,
 * multi-region access points, S3 Express session auth, auth scheme preference and SigV4a region
 * set, the profile and the files it is read from, configured endpoint URLs. The us-east-1
 * regional endpoint switch (not read by SDK v3 today) is included in case it comes back.
 */
export const ENDPOINT_ENV = [
  'AWS_USE_FIPS_ENDPOINT',
  'AWS_USE_DUALSTACK_ENDPOINT',
  'AWS_S3_US_EAST_1_REGIONAL_ENDPOINT',
  'AWS_S3_USE_ARN_REGION',
  'AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS',
  'AWS_S3_DISABLE_EXPRESS_SESSION_AUTH',
  'AWS_AUTH_SCHEME_PREFERENCE',
  'AWS_SIGV4A_SIGNING_REGION_SET',
  'AWS_PROFILE',
  'AWS_CONFIG_FILE',
  'AWS_SHARED_CREDENTIALS_FILE',
  'AWS_IGNORE_CONFIGURED_ENDPOINT_URLS',
  'AWS_ENDPOINT_URL',
  'AWS_ENDPOINT_URL_S3',
] as const;

/** Everything a fingerprint is made of: plain values, compared exactly. */
export type RouteInputs = Record<string, string | number | boolean | null>;

/** The store settings that decide the SDK's endpoint (the rest comes from the environment). */
export interface EndpointSettings {
  region: string;
  endpoint: string | undefined;
  forcePathStyle: boolean;
  ignoreConfiguredEndpointUrls: boolean;
}

/** The home directory as the SDK finds it (`HOME`, `USERPROFILE`, `HOMEDRIVE`+`HOMEPATH`). */
function sdkHomeDir(env: NodeJS.ProcessEnv): string {
  if (env.HOME) return env.HOME;
  if (env.USERPROFILE) return env.USERPROFILE;
  if (env.HOMEPATH) return `${env.HOMEDRIVE ?? `C:${path.sep}`}${env.HOMEPATH}`;
  return homedir();
}

/** A shared AWS file as the SDK resolves its path (a leading `~/` is the home directory). */
function sdkFilePath(configured: string | undefined, fallback: string, home: string): string {
  const file = configured || path.join(home, '.aws', fallback);
  return file.startsWith('~/') ? path.join(home, file.slice(2)) : file;
}

/** `path:mtimeMs:size` of a file, `path:none` when it is missing or unreadable. */
async function fileStamp(file: string): Promise<string> {
  try {
    const s = await stat(file);
    return `${file}:${s.mtimeMs}:${s.size}`;
  } catch (error) {
    // Missing (the usual case for a bare environment) or unreadable: the SDK reads it as empty.
    return `${file}:none:${(error as NodeJS.ErrnoException).code ?? 'error'}`;
  }
}

/** The installed `@aws-sdk/client-s3` version (its endpoint ruleset), or why it was not found. */
async function sdkVersion(): Promise<string | null> {
  try {
    const manifest = createRequire(import.meta.url).resolve('@aws-sdk/client-s3/package.json');
    const parsed = JSON.parse(await readFile(manifest, 'utf8')) as { version?: unknown };
    return typeof parsed.version === 'string' ? parsed.version : null;
  } catch (error) {
    // Not resolvable from here (an unusual install): the other inputs still key the file.
    return `unresolved:${(error as NodeJS.ErrnoException).code ?? 'error'}`;
  }
}

/**
 * The inputs of the SDK's endpoint resolution for a store with `settings`: the settings, each
 * of {@link ENDPOINT_ENV} from `env` (default `process.env`, which is what the SDK reads), the
 * shared config and credentials files' path, mtime and size, and the SDK's version. Never
 * throws (a file that cannot be read is recorded as such).
 */
export async function endpointInputs(
  settings: EndpointSettings,
  env: NodeJS.ProcessEnv = process.env,
): Promise<RouteInputs> {
  const inputs: RouteInputs = {
    format: FORMAT,
    region: settings.region,
    endpoint: settings.endpoint ?? null,
    forcePathStyle: settings.forcePathStyle,
    ignoreConfiguredEndpointUrls: settings.ignoreConfiguredEndpointUrls,
  };
  for (const name of ENDPOINT_ENV) inputs[name] = env[name] ?? null;
  const home = sdkHomeDir(env);
  const [config, credentials, version] = await Promise.all([
    fileStamp(sdkFilePath(env.AWS_CONFIG_FILE, 'config', home)),
    fileStamp(sdkFilePath(env.AWS_SHARED_CREDENTIALS_FILE, 'credentials', home)),
    sdkVersion(),
  ]);
  inputs.configFile = config;
  inputs.credentialsFile = credentials;
  inputs.sdkVersion = version;
  return inputs;
}

/**
 * The fingerprint of a set of inputs: hex SHA-256 (first 32 digits) of their canonical JSON
 * (keys sorted). Equal inputs give equal fingerprints in any order; any changed value, added or
 * removed input gives another.
 */
export function routeFingerprint(inputs: RouteInputs): string {
  const canonical = JSON.stringify(
    Object.keys(inputs)
      .sort()
      .map((k) => [k, inputs[k]]),
  );
  return sha256Hex(canonical).slice(0, 32);
}

/** A route as kept on disk: the route and when the SDK resolved it (ms since the epoch). */
interface StoredEntry {
  url: string;
  signingRegion: string;
  signingName: string;
  learnedAt: number;
}

/** A URL the lean path can send to: http(s), no query, fragment or credentials. */
function usableUrl(text: string): URL | undefined {
  if (!URL.canParse(text)) return undefined;
  const url = new URL(text);
  const ok =
    (url.protocol === 'http:' || url.protocol === 'https:') &&
    url.search === '' &&
    url.hash === '' &&
    url.username === '' &&
    url.password === '';
  return ok ? url : undefined;
}

/**
 * The fresh, well-formed entries of a route file's text: entries older than `maxAgeMs` (or
 * dated after `now`) and malformed entries are left out. Throws (SyntaxError, TypeError) for
 * text that is not a route file at all.
 */
export function parseRouteFile(
  text: string,
  now: number,
  maxAgeMs = ROUTE_MAX_AGE_MS,
): Map<string, StoredEntry> {
  const parsed = JSON.parse(text) as unknown;
  const routes = (parsed as { format?: unknown; routes?: unknown } | null)?.routes;
  if ((parsed as { format?: unknown }).format !== FORMAT || typeof routes !== 'object') {
    throw new TypeError(`not a route file of format ${FORMAT}`);
  }
  const out = new Map<string, StoredEntry>();
  for (const [id, value] of Object.entries(routes ?? {})) {
    const e = value as Partial<Record<keyof StoredEntry, unknown>> | null;
    if (
      typeof e?.url !== 'string' ||
      typeof e.signingRegion !== 'string' ||
      typeof e.signingName !== 'string' ||
      typeof e.learnedAt !== 'number' ||
      !/^(object|bucket):./.test(id) ||
      usableUrl(e.url) === undefined
    ) {
      continue;
    }
    const age = now - e.learnedAt;
    if (!(age >= 0 && age <= maxAgeMs)) continue;
    out.set(id, {
      url: e.url,
      signingRegion: e.signingRegion,
      signingName: e.signingName,
      learnedAt: e.learnedAt,
    });
  }
  return out;
}

/** What the lean path needs of stored routes (see {@link RouteStore}). */
export interface RouteHints {
  /** The stored routes by `kind:bucket`, read once; empty when there are none. Never rejects. */
  load(): Promise<ReadonlyMap<string, Route>>;
  /** Keep a route the SDK just resolved (written in the background). Never throws. */
  save(id: string, route: Route): void;
  /** Forget a stored route that failed (written in the background). Never throws. */
  drop(id: string): void;
}

/** What a {@link RouteStore} is built from. */
export interface RouteStoreOptions {
  /** The directory of route files (`<cache root>/v1/s3-routes`). */
  dir: string;
  /** The inputs of the SDK's endpoint resolution ({@link endpointInputs}); asked once. */
  inputs(): Promise<RouteInputs>;
  debug(message: string): void;
  /** The clock (tests). Default `Date.now`. */
  now?: (() => number) | undefined;
  /** Entries older than this are ignored. Default {@link ROUTE_MAX_AGE_MS}. */
  maxAgeMs?: number | undefined;
}

/** One store's route file: read once, written merged and atomically. See the module comment. */
export class RouteStore implements RouteHints {
  private file: Promise<string> | undefined;
  private loaded: Promise<ReadonlyMap<string, Route>> | undefined;
  /** Writes, one at a time; never rejects. */
  private pending: Promise<void> = Promise.resolve();
  private readonly now: () => number;
  private readonly maxAgeMs: number;

  constructor(private readonly options: RouteStoreOptions) {
    this.now = options.now ?? Date.now;
    this.maxAgeMs = options.maxAgeMs ?? ROUTE_MAX_AGE_MS;
  }

  /** The route file's path (`<dir>/<fingerprint>.json`), computed once. */
  path(): Promise<string> {
    this.file ??= this.options
      .inputs()
      .then((inputs) => path.join(this.options.dir, `${routeFingerprint(inputs)}.json`));
    return this.file;
  }

  /**
   * The stored, fresh routes by `kind:bucket`, read once per store. A missing file is no
   * routes; a corrupt or unreadable one is no routes too (logged). Never rejects.
   */
  load(): Promise<ReadonlyMap<string, Route>> {
    this.loaded ??= this.read().then((entries) => {
      const routes = new Map<string, Route>();
      for (const [id, e] of entries) {
        routes.set(id, {
          url: new URL(e.url),
          signingRegion: e.signingRegion,
          signingName: e.signingName,
        });
      }
      this.options.debug(`route store: ${routes.size} stored route(s)`);
      return routes;
    });
    return this.loaded;
  }

  /** Keep `route` for `id`, learned now: merged into the file in the background. */
  save(id: string, route: Route): void {
    this.update(`save ${id}`, (entries) => {
      entries.set(id, {
        url: route.url.href,
        signingRegion: route.signingRegion,
        signingName: route.signingName,
        learnedAt: this.now(),
      });
      return true;
    });
  }

  /** Remove `id` from the file in the background (no write when it is not there). */
  drop(id: string): void {
    this.update(`drop ${id}`, (entries) => entries.delete(id));
  }

  /** Resolves once every save and drop asked so far is written (or failed, logged). */
  flush(): Promise<void> {
    return this.pending;
  }

  /** The file's fresh entries; empty (logged unless simply missing) when it cannot be read. */
  private async read(): Promise<Map<string, StoredEntry>> {
    let file = '(unknown)';
    try {
      file = await this.path();
      return parseRouteFile(await readFile(file, 'utf8'), this.now(), this.maxAgeMs);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.options.debug(`route store: ignoring ${file}: ${String(error)}`);
      }
      return new Map();
    }
  }

  /** Apply `change` to the file's current entries and write them, after earlier writes. */
  private update(what: string, change: (entries: Map<string, StoredEntry>) => boolean): void {
    this.pending = this.pending.then(async () => {
      try {
        const file = await this.path();
        const entries = await this.read();
        if (!change(entries)) return;
        const routes = Object.fromEntries([...entries].sort(([a], [b]) => (a < b ? -1 : 1)));
        await writeFileAtomic(file, `${JSON.stringify({ format: FORMAT, routes }, null, 1)}\n`);
        this.options.debug(`route store: ${what} written to ${file}`);
      } catch (error) {
        this.options.debug(`route store: could not ${what}: ${String(error)}`);
      }
    });
  }
}
