/**
 * Building a {@link ManagedStage}: from a descriptor (the API), or from the short strings the
 * CLI takes. The descriptor's kind (kinds.ts) is the driver's; building a stage loads nothing but
 * that kind's small descriptor module: the driver and its SDK load on the stage's first I/O.
 *
 * @module
 */
import { readFile } from 'node:fs/promises';
import '../store/registry.js';
import { parseStageDescriptor, parseWithKind } from './descriptor.js';
import { StageConfigError } from './errors.js';
import { Stage, type StageOptions } from './stage.js';
import type { StageDescriptor } from './stage-kinds.js';
import { stageKinds } from './stage-kinds.js';

export type { StageOptions } from './stage.js';

/**
 * The stage a descriptor describes. The descriptor is validated strictly first (a raw object
 * or JSON text is accepted; see descriptor.ts). No I/O. Throws StageConfigError.
 */
export function stageFromDescriptor(
  descriptor: StageDescriptor | string | unknown,
  options: StageOptions = {},
): Stage {
  const { descriptor: parsed, kind } = parseWithKind(descriptor);
  return new Stage(parsed, kind, options);
}

/**
 * The descriptor a CLI stage string names: `@file.json` (the descriptor in that file), or a
 * string of a registered kind's shape — `file:///abs/root/` (local), `s3://bucket/prefix/`
 * (region, endpoint and path style from the AWS environment), and so on for each driver, which
 * reads its own environment. Throws StageConfigError.
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
  for (const kind of stageKinds()) {
    const descriptor = kind.fromString?.(text, env);
    if (descriptor !== undefined) return descriptor;
  }
  throw new StageConfigError(
    `a stage is file:///abs/root/, s3://bucket/prefix/ (or another driver's bucket/prefix/) or @descriptor.json, not ${JSON.stringify(text)}`,
  );
}

/** {@link descriptorFromString} then {@link stageFromDescriptor}. */
export async function stageFromString(text: string, options: StageOptions = {}): Promise<Stage> {
  return stageFromDescriptor(await descriptorFromString(text, options.env), options);
}
