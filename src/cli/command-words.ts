/**
 * Which arguments name the command: the one rule shared by the CLI's dispatch (`main.ts`) and
 * the executable (`bin.ts`), which must know the command before the CLI's modules load. Kept in
 * a module of its own, with no imports, so that loading it early costs nothing.
 *
 * @module
 */

/** The command's words of `argv`: not options, nor the value of a global `--profile NAME`. */
export function commandWords(argv: readonly string[]): string[] {
  return argv.filter((a, i) => !a.startsWith('-') && argv[i - 1] !== '--profile');
}
