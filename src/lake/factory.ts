/**
 * Building a {@link ManagedStage}: from a descriptor (the API), or from the short strings the
 * CLI takes.
 *
 * @module
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { S3Client } from '@aws-sdk/client-s3';
import { normalizePrefix, parseStageDescriptor, type StageDescriptor } from './descriptor.js';
import { StageConfigError } from './errors.js';
import { fileUriSegments } from './keys.js';
import { LocalStage } from './local-stage.js';
import { S3Stage, type S3StageOptions } from './s3-stage.js';
import type { ManagedStage } from './stage.js';

/** Options of {@link stageFromDescriptor}. */
export interface StageOptions extends S3StageOptions {
  /** An S3 client to use instead of the one built from the descriptor (S3 stages). */
  client?: S3Client | undefined;
}

/**
 * The stage a descriptor describes. The descriptor is validated strictly first (a raw object
 * or JSON text is accepted; see descriptor.ts). No I/O: the S3 client is created on first use.
 * Throws StageConfigError.
 */
export function stageFromDescriptor(
  descriptor: StageDescriptor | string | unknown,
  options: StageOptions = {},
): ManagedStage {
  const parsed = parseStageDescriptor(descriptor);
  if (parsed.kind === 'local') return new LocalStage(parsed);
  return new S3Stage(parsed, options);
}

function truthy(value: string | undefined): boolean {
  const v = value?.trim().toLowerCase();
  return v === '1' || v === 'true' || v === 'yes' || v === 'on';
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

/**
 * The descriptor a CLI stage string names:
 * - `file:///abs/root/` — a local stage at that directory;
 * - `s3://bucket/prefix/` — an S3 stage; region from `AWS_REGION` (default `us-east-1`), endpoint
 *   from `AWS_ENDPOINT_URL_S3` then `AWS_ENDPOINT_URL`, path-style from
 *   `PROVCAT_S3_FORCE_PATH_STYLE=1`;
 * - `@file.json` — the descriptor in that file.
 * Throws StageConfigError.
 */
export async function descriptorFromString(
  text: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<StageDescriptor> {
  if (text.startsWith('@')) {
    const file = text.slice(1);
    let json: string;
    try {
      json = await readFile(file, 'utf8');
    } catch (cause) {
      throw new StageConfigError(`cannot read the stage descriptor ${file}`, { cause });
    }
    return parseStageDescriptor(json);
  }
  if (text.startsWith('file://')) {
    const body = text.endsWith('/') ? text.slice(0, -1) : text;
    let root: string;
    try {
      fileUriSegments(body);
      root = fileURLToPath(body);
    } catch (cause) {
      throw new StageConfigError(`not a usable file:///abs/root/ stage: ${text}`, { cause });
    }
    return parseStageDescriptor({ version: 1, kind: 'local', root });
  }
  const m = /^s3:\/\/([^/?#]+)(?:\/([^?#]*))?$/.exec(text);
  if (m) {
    const endpoint = truthy(env.AWS_IGNORE_CONFIGURED_ENDPOINT_URLS)
      ? undefined
      : (nonEmpty(env.AWS_ENDPOINT_URL_S3) ?? nonEmpty(env.AWS_ENDPOINT_URL));
    return parseStageDescriptor({
      version: 1,
      kind: 's3',
      bucket: m[1],
      prefix: normalizePrefix(decodeStagePrefix(m[2] ?? '', text)),
      region: nonEmpty(env.AWS_REGION) ?? nonEmpty(env.AWS_DEFAULT_REGION) ?? 'us-east-1',
      ...(endpoint === undefined ? {} : { endpoint }),
      forcePathStyle: truthy(env.PROVCAT_S3_FORCE_PATH_STYLE),
    });
  }
  throw new StageConfigError(
    `a stage is file:///abs/root/, s3://bucket/prefix/ or @descriptor.json, not ${JSON.stringify(text)}`,
  );
}

function decodeStagePrefix(raw: string, text: string): string {
  try {
    return raw
      .split('/')
      .map((s) => {
        const decoded = decodeURIComponent(s);
        if (decoded.includes('/')) throw new URIError(`encoded '/' in '${s}'`);
        return decoded;
      })
      .join('/');
  } catch (cause) {
    throw new StageConfigError(`bad prefix in the stage ${text}`, { cause });
  }
}

/** {@link descriptorFromString} then {@link stageFromDescriptor}. */
export async function stageFromString(
  text: string,
  options: StageOptions & { env?: NodeJS.ProcessEnv | undefined } = {},
): Promise<ManagedStage> {
  return stageFromDescriptor(await descriptorFromString(text, options.env), options);
}
