/**
 * {@link requireFreshBuild}: tests whose child processes import dist/ refuse a build older than
 * the sources, so a stale build is never what they test.
 *
 * @module
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * Throw unless `dist/<folder>/<entry>` exists and is newer than every .ts file of `folder`
 * (a folder of the repository at `repo`, e.g. `drivers/local`).
 */
export function requireFreshBuild(repo: string, folder: string, entry: string): void {
  const dist = path.join(repo, 'dist', folder, entry);
  if (!existsSync(dist)) throw new Error(`${dist} is missing: run \`npm run build\` first`);
  const built = statSync(dist).mtimeMs;
  for (const source of readdirSync(path.join(repo, folder))) {
    if (!source.endsWith('.ts')) continue;
    if (statSync(path.join(repo, folder, source)).mtimeMs > built) {
      throw new Error(`dist/ is older than ${folder}/${source}: run \`npm run build\``);
    }
  }
}
