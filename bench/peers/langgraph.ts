import { BaseChatModel } from '@langchain/core/language_models/chat_models';
import type { BaseMessage } from '@langchain/core/messages';
import { AIMessage, HumanMessage } from '@langchain/core/messages';
import type { ChatResult } from '@langchain/core/outputs';
import { tool } from '@langchain/core/tools';
import { END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode, toolsCondition } from '@langchain/langgraph/prebuilt';
import { z } from 'zod';
import { STEPS, TOOL_NAME, lookup } from '../lib/workload.ts';

/** The scripted chat model: the step is the number of AI messages so far; answers with tool calls. */
class ScriptedChatModel extends BaseChatModel {
  _llmType(): string {
    return 'bench-scripted';
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const stepIndex = messages.filter((message) => AIMessage.isInstance(message)).length;
    const step = STEPS[stepIndex] ?? STEPS.at(-1)!;
    const message = new AIMessage({
      content: step.text,
      tool_calls: step.toolCalls.map((call, n) => ({ id: `call_${stepIndex}_${n}`, name: call.name, args: { ...call.args }, type: 'tool_call' as const })),
    });
    return { generations: [{ text: step.text, message }] };
  }
}

const lookupTool = tool(async ({ key }: { key: string }) => lookup(key), {
  name: TOOL_NAME,
  description: 'Looks up the value of a key.',
  schema: z.object({ key: z.string() }),
});

const model = new ScriptedChatModel({});

const graph = new StateGraph(MessagesAnnotation)
  .addNode('agent', async (state: typeof MessagesAnnotation.State) => ({ messages: [await model.invoke(state.messages)] }))
  .addNode('tools', new ToolNode([lookupTool]))
  .addEdge(START, 'agent')
  .addConditionalEdges('agent', toolsCondition, ['tools', END])
  .addEdge('tools', 'agent')
  .compile();

/** One session of the workload through a LangGraph.js `StateGraph` with a `ToolNode`. */
export async function runLangGraphSession(prompt: string): Promise<string> {
  const state = await graph.invoke({ messages: [new HumanMessage(prompt)] });
  const messages = state.messages;
  const last = messages.at(-1);
  const ai = messages.filter((message) => AIMessage.isInstance(message)).length;
  if (ai !== STEPS.length) throw new Error(`langgraph: ${ai} model calls`);
  return typeof last?.content === 'string' ? last.content : '';
}
