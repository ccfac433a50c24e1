// ComfyUI-Ditto front-end extension: after a run, every Ditto node shows how long its stage took
// and at how many frames per second (the node's UI output "ditto_stats").
//
// The figures are a badge in the node's badge row, the row above the title bar where the frontend
// lays out its own badges (the node-source pill, the node id) side by side: the frontend places
// ours next to them at every zoom, so nothing covers it. Saved videos need nothing from here: the
// save nodes report them as core Save Video does, and the frontend's own preview plays them.
import { app } from "../../scripts/app.js";

const STATS_KEY = "ditto_stats";
const FONT_SIZE = 12;
const PADDING = 6;
const HEIGHT = 20; // the frontend's badge height, so the row stays level

function formatStats(stats) {
  const seconds = stats.seconds < 10 ? stats.seconds.toFixed(2) : stats.seconds.toFixed(1);
  const parts = [`${seconds} s`];
  if (stats.frames !== undefined) parts.push(`${stats.frames} frames`);
  if (stats.fps) parts.push(`${stats.fps < 1 ? stats.fps.toFixed(2) : stats.fps.toFixed(1)} fps`);
  return parts.join(" · ");
}

// Drawn by the frontend's badge layout (LGraphNode.drawBadges), which asks every badge for its
// width and then where to draw it.
class StatsBadge {
  constructor(text) {
    this.text = text;
    this.height = HEIGHT;
    this.isDittoStats = true;
  }

  get visible() {
    return !!this.text;
  }

  getWidth(ctx) {
    if (!this.visible) return 0;
    const font = ctx.font;
    ctx.font = `${FONT_SIZE}px sans-serif`;
    const width = ctx.measureText(this.text).width + 2 * PADDING;
    ctx.font = font;
    return width;
  }

  draw(ctx, x, y) {
    if (!this.visible) return;
    const { font, fillStyle, textAlign, textBaseline } = ctx;
    const width = this.getWidth(ctx);
    ctx.fillStyle = "#1d3b23";
    ctx.beginPath();
    ctx.roundRect(x, y, width, this.height, 5);
    ctx.fill();
    ctx.font = `${FONT_SIZE}px sans-serif`;
    ctx.fillStyle = "#a6e3a6";
    ctx.textAlign = "left";
    ctx.textBaseline = "middle";
    ctx.fillText(this.text, x + PADDING, y + this.height / 2);
    Object.assign(ctx, { font, fillStyle, textAlign, textBaseline });
  }
}

app.registerExtension({
  name: "ComfyUI-Ditto.StageStats",
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (nodeData.category !== "Ditto") return;

    const onNodeCreated = nodeType.prototype.onNodeCreated;
    nodeType.prototype.onNodeCreated = function () {
      onNodeCreated?.apply(this, arguments);
      this.badges?.push(() => new StatsBadge(this.dittoStats));
    };

    // The frontend grows the node to fit the video preview while drawing a frame, and draws
    // the next frame only on the next input: redraw once more so the node shows its new size.
    const onResize = nodeType.prototype.onResize;
    nodeType.prototype.onResize = function () {
      onResize?.apply(this, arguments);
      requestAnimationFrame(() => this.setDirtyCanvas(true, true));
    };

    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (output) {
      onExecuted?.apply(this, arguments);
      const stats = output?.[STATS_KEY]?.[0];
      this.dittoStats = stats ? formatStats(stats) : undefined;
      this.setDirtyCanvas(true, true);
    };
  },
});
