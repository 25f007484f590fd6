// The npm `libretranslate` client, unmodified, against this server: node client_check.mjs URL KEY CASES_JSON
// CASES_JSON: [{query, source, target, format?}]; prints one JSON line: per case {text} or {error}.
import { translate } from "libretranslate";

const [apiurl, apiKey, cases] = process.argv.slice(2);
const out = [];
for (const c of JSON.parse(cases)) {
  try {
    out.push({ text: await translate({ ...c, apiurl, apiKey }) ?? null });
  } catch (e) {
    out.push({ error: String(e.message ?? e) });
  }
}
console.log(JSON.stringify(out));
