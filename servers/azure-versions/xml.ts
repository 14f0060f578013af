/**
 * The little XML the Blob service speaks, written and read by hand: error bodies, blob names,
 * block lists.
 *
 * Responses are built as strings (the shapes are small and fixed); the one request body the
 * server parses, Put Block List, has a flat shape that a strict scan reads completely — anything
 * it does not recognise makes the request a 400, never a partial commit.
 *
 * @module
 */

/** The XML declaration every body starts with. */
export const XML_DECLARATION = '<?xml version="1.0" encoding="utf-8"?>';

/** Escape text for an element body or an attribute. */
export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => {
    switch (c) {
      case '&':
        return '&amp;';
      case '<':
        return '&lt;';
      case '>':
        return '&gt;';
      case '"':
        return '&quot;';
      default:
        return '&apos;';
    }
  });
}

/** Characters a name cannot carry as XML text (control characters, U+FFFE, U+FFFF). */
function notXmlText(name: string): boolean {
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c < 0x20 || c === 0xfffe || c === 0xffff) return true;
  }
  return false;
}

/**
 * A `<Name>` element for a blob or prefix name. Names with characters XML text cannot carry are
 * sent percent-encoded with `Encoded="true"`, as the service does; the SDK decodes them.
 */
export function nameElement(name: string): string {
  if (notXmlText(name)) {
    return `<Name Encoded="true">${escapeXml(encodeURIComponent(name))}</Name>`;
  }
  return `<Name>${escapeXml(name)}</Name>`;
}

/** The body of an error answer: `<Error><Code/><Message/></Error>`. */
export function errorBody(code: string, message: string, requestId: string): string {
  const time = new Date().toISOString();
  return (
    `${XML_DECLARATION}<Error><Code>${escapeXml(code)}</Code>` +
    `<Message>${escapeXml(`${message}\nRequestId:${requestId}\nTime:${time}`)}</Message></Error>`
  );
}

/** Where a Put Block List entry takes its block from. */
export type BlockListSource = 'Latest' | 'Committed' | 'Uncommitted';

/** One entry of a Put Block List body. */
export interface BlockListEntry {
  source: BlockListSource;
  id: string;
}

function unescapeXml(text: string): string {
  return text.replace(/&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-f]+);/gi, (_, name: string) => {
    const lower = name.toLowerCase();
    if (lower === 'amp') return '&';
    if (lower === 'lt') return '<';
    if (lower === 'gt') return '>';
    if (lower === 'quot') return '"';
    if (lower === 'apos') return "'";
    const code = lower.startsWith('#x')
      ? Number.parseInt(lower.slice(2), 16)
      : Number(lower.slice(1));
    return String.fromCodePoint(code);
  });
}

/**
 * Parse a Put Block List body, `<BlockList><Latest>id</Latest>...</BlockList>`. Returns the
 * entries in order, or a string saying what is wrong with the body.
 */
export function parseBlockList(body: string): BlockListEntry[] | string {
  let rest = body.trim().replace(/^<\?xml[^>]*\?>\s*/, '');
  const open = /^<BlockList\s*>/.exec(rest);
  if (!open) {
    if (/^<BlockList\s*\/>$/.test(rest)) return [];
    return 'the body is not a <BlockList> element';
  }
  rest = rest.slice(open[0].length);
  const entries: BlockListEntry[] = [];
  const item = /^\s*<(Latest|Committed|Uncommitted)>([^<]*)<\/\1>/;
  for (;;) {
    const m = item.exec(rest);
    if (!m) break;
    entries.push({ source: m[1] as BlockListSource, id: unescapeXml((m[2] as string).trim()) });
    rest = rest.slice(m[0].length);
  }
  if (!/^\s*<\/BlockList>\s*$/.test(rest)) {
    return `unexpected content in the block list: ${JSON.stringify(rest.slice(0, 60))}`;
  }
  return entries;
}

/** `<Block><Name>id</Name><Size>n</Size></Block>` for each block. */
export function blocksXml(blocks: Iterable<{ id: string; size: number }>): string {
  let out = '';
  for (const b of blocks)
    out += `<Block><Name>${escapeXml(b.id)}</Name><Size>${b.size}</Size></Block>`;
  return out;
}
