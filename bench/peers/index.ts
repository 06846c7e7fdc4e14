import { runLangGraphSession } from './langgraph.ts';
import { runVercelSession } from './vercel-ai.ts';

/** The peers measured beside agentbus; loaded only when the bench's own dependencies are installed. */
export const peers: ReadonlyArray<{ key: string; name: string; packages: readonly string[]; run: (prompt: string) => Promise<string> }> = [
  { key: 'vercel', name: 'Vercel AI generateText (mock model)', packages: ['ai'], run: runVercelSession },
  { key: 'langgraph', name: 'LangGraph.js StateGraph + ToolNode', packages: ['@langchain/langgraph', '@langchain/core'], run: runLangGraphSession },
];
