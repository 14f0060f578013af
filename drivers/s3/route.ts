/**
 * What a lean request's route is: where the SDK sends a bucket's requests of one kind and how it
 * signs them ({@link Route}), the route known without asking the SDK ({@link pathStyleRoute}),
 * and the URL parts a signed request reads of it ({@link routeParts}). Which route a request
 * takes is route-book.ts; routes kept between processes are route-store.ts.
 *
 * @module
 */

/** Where the SDK sends a bucket's requests of one kind, and how it signs them. */
export interface Route {
  url: URL;
  signingRegion: string;
  signingName: string;
}

/**
 * The route the SDK's endpoint ruleset resolves for a bucket at an explicit endpoint with
 * path-style addressing: `endpoint` + `/bucket/`, signed with SigV4 as `s3` in `region`.
 * `undefined` for a bucket name the ruleset treats specially (anything but a plain DNS-style
 * name: ARNs, access points) and for an endpoint with a query or credentials in it.
 */
export function pathStyleRoute(
  endpoint: string,
  region: string,
  bucket: string,
): Route | undefined {
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket)) return undefined;
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return undefined;
  }
  if (
    (url.protocol !== 'http:' && url.protocol !== 'https:') ||
    url.search !== '' ||
    url.hash !== '' ||
    url.username !== '' ||
    url.password !== ''
  ) {
    return undefined;
  }
  const base = url.pathname.endsWith('/') ? url.pathname.slice(0, -1) : url.pathname;
  url.pathname = `${base}/${bucket}`;
  return { url, signingRegion: region, signingName: 's3' };
}

/** What signing a request on a route reads of its URL. */
export interface RouteParts {
  /** The path every request of the route starts with, ending in `/`. */
  base: string;
  host: string;
  protocol: string;
  hostname: string;
  port: number | undefined;
}

const routePartsOf = new WeakMap<Route, RouteParts>();

/**
 * The URL parts of a route, read once per route: routes are never changed once made, and each
 * `URL` getter slices its text again (seven of them per request cost ~10 µs here).
 */
export function routeParts(route: Route): RouteParts {
  let parts = routePartsOf.get(route);
  if (parts === undefined) {
    const { url } = route;
    parts = {
      base: url.pathname.endsWith('/') ? url.pathname : `${url.pathname}/`,
      host: url.host,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port === '' ? undefined : Number(url.port),
    };
    routePartsOf.set(route, parts);
  }
  return parts;
}
