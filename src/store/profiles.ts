/**
 * Named endpoints: profiles in a config file, so that one process reads `s3://` on AWS and
 * `s3://` on a lab's S3-compatible server side by side.
 *
 * The file is `PROVCAT_CONFIG`, else `config` in the platform's config folder (env-paths:
 * `~/.config/provcat/config` on Linux). It is INI, as AWS's `~/.aws/config` and rclone's
 * `rclone.conf` are:
 *
 * ```ini
 * # comments start with # or ;
 * [profile lab]
 * scheme = s3
 * endpoint = http://rgw.lab:7480
 * region = us-east-1
 * path-style = true
 * access-key-id-env = LAB_KEY_ID        # the NAMES of the variables holding the secret
 * secret-access-key-env = LAB_SECRET
 *
 * [profile prod]
 * scheme = s3
 * aws-profile = prod                    # or a profile of ~/.aws/config
 * ```
 *
 * A profile is selected by the store option (`storeFor(uri, {profile: 'lab'})`), else by
 * `PROVCAT_PROFILE` (the CLI's `--profile NAME` sets it); never by the URI. A URI names data and
 * is written into commits, DataLocations and notebooks that other people run: a machine-local
 * alias inside it (rclone's `lab:bucket/key`, or `s3://lab@bucket/key`) would make the same data
 * have a different name on every machine, and a name that means nothing elsewhere. fsspec makes
 * the same choice: `s3://bucket/key` plus per-protocol `storage_options` (endpoint, profile).
 *
 * Precedence, per setting: an explicit store option, then the environment variable that sets it
 * today (`AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
 * `PROVCAT_S3_FORCE_PATH_STYLE`, `AWS_ACCESS_KEY_ID`/`AWS_PROFILE` for credentials,
 * `STORAGE_EMULATOR_HOST`, `GOOGLE_CLOUD_PROJECT`, `GOOGLE_APPLICATION_CREDENTIALS`,
 * `PROVCAT_AZURE_ENDPOINT`, `AZURE_STORAGE_ACCOUNT`, `AZURE_STORAGE_KEY`, `PROVCAT_LOCAL_ROOT`),
 * then the profile. Credentials are only ever referenced (an AWS profile, a key file's path, the
 * names of environment variables): a key that would hold a secret is refused, provcat never
 * writes this file, and no message prints a value read through it. A profile's store caches in
 * a folder of its own (`<cache>-profile-NAME`), since the same bucket name on two endpoints is
 * two different buckets. A bad file is `InvalidArgument` naming the file and the line.
 *
 * @module
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import envPaths from 'env-paths';
import { defaultCacheRoot } from '../cache/cache.js';
import { InvalidArgument } from '../core/errors.js';

/**
 * The settings each scheme's profile may hold: config key → the driver option it sets, and the
 * environment variables that, when set, win over it (they configure the same thing today).
 */
const KEYS: Record<string, Record<string, [option: string, envWins: string[]]>> = {
  s3: {
    endpoint: ['endpoint', ['AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL']],
    region: ['region', ['AWS_REGION', 'AWS_DEFAULT_REGION']],
    'path-style': ['forcePathStyle', ['PROVCAT_S3_FORCE_PATH_STYLE']],
    'aws-profile': ['awsProfile', ['AWS_ACCESS_KEY_ID', 'AWS_PROFILE']],
    'access-key-id-env': ['credentials', ['AWS_ACCESS_KEY_ID', 'AWS_PROFILE']],
    'secret-access-key-env': ['credentials', ['AWS_ACCESS_KEY_ID', 'AWS_PROFILE']],
    'session-token-env': ['credentials', ['AWS_ACCESS_KEY_ID', 'AWS_PROFILE']],
  },
  gs: {
    endpoint: ['apiEndpoint', ['STORAGE_EMULATOR_HOST']],
    project: ['projectId', ['GOOGLE_CLOUD_PROJECT', 'GCLOUD_PROJECT']],
    'key-file': ['keyFilename', ['GOOGLE_APPLICATION_CREDENTIALS']],
  },
  az: {
    endpoint: ['endpoint', ['PROVCAT_AZURE_ENDPOINT', 'AZURE_STORAGE_CONNECTION_STRING']],
    account: ['account', ['AZURE_STORAGE_ACCOUNT', 'AZURE_STORAGE_CONNECTION_STRING']],
    'account-key-env': ['accountKey', ['AZURE_STORAGE_KEY', 'AZURE_STORAGE_CONNECTION_STRING']],
  },
  local: { root: ['root', ['PROVCAT_LOCAL_ROOT']] },
};

/** Keys that would put a secret in the file: refused, with what to write instead. */
const SECRET = /secret|password|token|^key$|access-key-id$|account-key$|connection-string|sas/i;

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/** One profile of the config file. */
export interface Profile {
  /** Its name (`[profile NAME]`). */
  readonly name: string;
  /** The scheme it serves (`s3`, `gs`, `az`, `local`). */
  readonly scheme: string;
  /** Its settings, config key → value, as written. */
  readonly settings: ReadonlyMap<string, string>;
  /** Where it is: `file:line` of its header, for messages. */
  readonly where: string;
}

/** The config file: `PROVCAT_CONFIG`, else `config` in env-paths' config folder for provcat. */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  const given = env.PROVCAT_CONFIG;
  if (given !== undefined && given !== '') return path.resolve(given);
  return path.join(envPaths('provcat', { suffix: '' }).config, 'config');
}

/**
 * Parse a config file's text. `InvalidArgument` naming `file:line` for a line that is not a
 * header, a `key = value`, a comment or blank; a duplicate profile or key; a key the profile's
 * scheme does not take, or one that would hold a secret; a profile without a known `scheme`.
 */
export function parseProfiles(text: string, file: string): Map<string, Profile> {
  const profiles = new Map<string, Profile>();
  const bad = (line: number, why: string) => new InvalidArgument(`${file}:${line}: ${why}`);
  let current: { name: string; line: number; settings: Map<string, string> } | undefined;
  /** The keys of the current profile with their line numbers. */
  let lines: [string, number][] = [];
  const close = () => {
    if (current === undefined) return;
    const scheme = current.settings.get('scheme');
    if (scheme === undefined) {
      throw bad(current.line, `profile ${current.name} has no 'scheme = s3|gs|az|local'`);
    }
    const allowed = KEYS[scheme];
    if (allowed === undefined) {
      throw bad(
        current.line,
        `profile ${current.name}: unknown scheme '${scheme}' (s3, gs, az, local)`,
      );
    }
    for (const [key, at] of lines) {
      if (key !== 'scheme' && allowed[key] === undefined) {
        throw bad(
          at,
          `'${key}' is not a setting of a ${scheme} profile (${Object.keys(allowed).join(', ')})`,
        );
      }
    }
    const settings = new Map(current.settings);
    settings.delete('scheme');
    profiles.set(current.name, {
      name: current.name,
      scheme,
      settings,
      where: `${file}:${current.line}`,
    });
  };
  text.split(/\r?\n/).forEach((raw, i) => {
    const n = i + 1;
    const line = (i === 0 ? raw.replace(/^\uFEFF/, '') : raw).trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) return;
    const header = /^\[\s*profile\s+([^\]\s]+)\s*\]$/.exec(line);
    if (header) {
      close();
      const name = header[1] as string;
      if (!NAME.test(name))
        throw bad(n, `'${name}' cannot name a profile (letters, digits, . _ -)`);
      if (profiles.has(name)) throw bad(n, `profile ${name} is defined twice`);
      current = { name, line: n, settings: new Map() };
      lines = [];
      return;
    }
    if (line.startsWith('[')) throw bad(n, `a section is '[profile NAME]', not '${line}'`);
    const eq = line.indexOf('=');
    if (eq < 0) throw bad(n, 'expected "key = value", "[profile NAME]" or a # comment');
    const key = line.slice(0, eq).trim().toLowerCase();
    const value = line
      .slice(eq + 1)
      .replace(/\s[#;].*$/, '')
      .trim();
    if (current === undefined) throw bad(n, `'${key}' comes before any [profile NAME]`);
    if (SECRET.test(key) && !key.endsWith('-env')) {
      throw bad(
        n,
        `'${key}' would hold a secret; this file only references credentials: name the environment variables holding them (access-key-id-env, secret-access-key-env, account-key-env) or an AWS profile (aws-profile)`,
      );
    }
    if (current.settings.has(key)) throw bad(n, `'${key}' is set twice in profile ${current.name}`);
    if (value === '') throw bad(n, `'${key}' has no value`);
    current.settings.set(key, value);
    lines.push([key, n]);
  });
  close();
  return profiles;
}

/** Profile `name` from the config file. `InvalidArgument` when the file or the profile is missing or bad. */
export async function loadProfile(
  name: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Profile> {
  const file = configPath(env);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    throw new InvalidArgument(`no profile ${name}: the config file ${file} does not exist`, {
      cause: error,
    });
  }
  const profiles = parseProfiles(text, file);
  const profile = profiles.get(name);
  if (profile === undefined) {
    const known = [...profiles.keys()].join(', ') || 'none';
    throw new InvalidArgument(`no profile ${name} in ${file} (profiles: ${known})`);
  }
  return profile;
}

/** True when one of the variables is set (non-empty). */
function anySet(env: NodeJS.ProcessEnv, names: readonly string[]): boolean {
  return names.some((n) => env[n] !== undefined && env[n] !== '');
}

/** The value of the variable a profile names; `InvalidArgument` (naming it, not its value) when unset. */
function fromEnv(env: NodeJS.ProcessEnv, variable: string, profile: Profile, key: string): string {
  const value = env[variable];
  if (value === undefined || value === '') {
    throw new InvalidArgument(
      `profile ${profile.name} (${profile.where}): ${key} names ${variable}, which is not set`,
    );
  }
  return value;
}

/**
 * The driver options a profile gives (before the caller's own, which win), leaving out every
 * setting whose environment variable is set (`KEYS`), plus a cache of its own when the
 * caller gave none.
 */
export function profileOptions(
  profile: Profile,
  env: NodeJS.ProcessEnv,
  given: { cache?: unknown },
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const keys = KEYS[profile.scheme] ?? {};
  const s = profile.settings;
  const wins = (key: string) => anySet(env, keys[key]?.[1] ?? []);
  for (const [key, value] of s) {
    const [option] = keys[key] ?? [];
    if (option === undefined || option === 'credentials' || wins(key)) continue;
    if (option === 'accountKey') out.accountKey = fromEnv(env, value, profile, key);
    else if (option === 'forcePathStyle') {
      if (value !== 'true' && value !== 'false') {
        throw new InvalidArgument(
          `profile ${profile.name} (${profile.where}): path-style is true or false, not '${value}'`,
        );
      }
      out.forcePathStyle = value === 'true';
    } else out[option] = value;
  }
  const idVar = s.get('access-key-id-env');
  const secretVar = s.get('secret-access-key-env');
  if ((idVar === undefined) !== (secretVar === undefined)) {
    throw new InvalidArgument(
      `profile ${profile.name} (${profile.where}): access-key-id-env and secret-access-key-env go together`,
    );
  }
  if (idVar !== undefined && secretVar !== undefined && !wins('access-key-id-env')) {
    const tokenVar = s.get('session-token-env');
    out.credentials = {
      accessKeyId: fromEnv(env, idVar, profile, 'access-key-id-env'),
      secretAccessKey: fromEnv(env, secretVar, profile, 'secret-access-key-env'),
      sessionToken:
        tokenVar === undefined ? undefined : fromEnv(env, tokenVar, profile, 'session-token-env'),
    };
  }
  if (given.cache === undefined) out.cache = `${defaultCacheRoot(env)}-profile-${profile.name}`;
  return out;
}
